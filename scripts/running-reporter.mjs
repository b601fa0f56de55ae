// A node:test reporter for scripts/run-tests.mjs, on stderr: one line as each test begins and
// ends (`#upscope-test + NAME`, `- NAME`, by its depth), so that a file killed at its time
// limit can name the tests that were still running. (Not a file of its own: the tests' check
// that nothing is left open would see it.) The runner takes these lines out of what it prints.
export const MARK = '#upscope-test ';

export default async function* running(source) {
  for await (const event of source) {
    const { name, nesting } = event.data ?? {};
    if (event.type === 'test:dequeue') yield `${MARK}${nesting} + ${name}\n`;
    else if (event.type === 'test:pass' || event.type === 'test:fail')
      yield `${MARK}${nesting} - ${name}\n`;
  }
}

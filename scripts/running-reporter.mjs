// A node:test reporter for scripts/run-tests.mjs: one line as each test begins and ends
// (`+ NAME`, `- NAME`, indented by its depth), so that a file killed at its time limit can
// name the tests that were still running.
export default async function* running(source) {
  for await (const event of source) {
    const { name, nesting } = event.data ?? {};
    if (event.type === 'test:dequeue') yield `${'  '.repeat(nesting)}+ ${name}\n`;
    else if (event.type === 'test:pass' || event.type === 'test:fail')
      yield `${'  '.repeat(nesting)}- ${name}\n`;
  }
}

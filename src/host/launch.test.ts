// Commands launched held (stopped before their exec) for their probes to be placed: what
// becomes of them when upscope is told to end meanwhile, and of upscope's signal handling.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { test } from 'node:test';
import { launchStopped, processEnded, procState } from './launch.js';

/** Whether `pid` ends within two seconds. */
async function gone(pid: number): Promise<boolean> {
  for (let i = 0; i < 100 && !processEnded(pid); i++) {
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  return processEnded(pid);
}

test('a SIGTERM or SIGINT to a process holding a launched command ends the command too, then the process by that signal', async () => {
  const launch = new URL('./launch.ts', import.meta.url).pathname;
  for (const signal of ['SIGTERM', 'SIGINT'] as const) {
    // A process that launches a command, says its pid, and is then sent the signal while the
    // command is still held.
    const run = spawnSync(
      process.execPath,
      [
        '--import',
        'tsx',
        '--input-type=module',
        '-e',
        `const { launchStopped } = await import(${JSON.stringify(launch)});
         const held = await launchStopped('sleep 37');
         console.log(held.pid);
         process.kill(process.pid, ${JSON.stringify(signal)});
         await new Promise((resolve) => setTimeout(resolve, 5000));`,
      ],
      { encoding: 'utf8', timeout: 20_000 },
    );
    assert.equal(run.signal, signal, `${signal}: ${run.stderr}`);
    const pid = Number(run.stdout.trim());
    assert.ok(pid > 0, run.stdout);
    assert.ok(await gone(pid), `${signal}: the held command ${pid} is ended (${procState(pid)})`);
  }
});

test('many commands held at once: no listener-leak warning, and no listener left once they end', async () => {
  const warnings: string[] = [];
  const warned = (warning: Error) => warnings.push(warning.name);
  process.on('warning', warned);
  const before = process.listenerCount('SIGINT');
  const held = [];
  try {
    for (let i = 0; i < 14; i++) held.push(await launchStopped('sleep 37'));
    for (const command of held) assert.equal(procState(command.pid), 'T', 'held stopped');
    assert.equal(process.listenerCount('SIGINT'), before + 14);
  } finally {
    for (const command of held) command.kill();
  }
  for (const command of held) assert.ok(await gone(command.pid), `${command.pid} ended`);
  await new Promise((resolve) => setImmediate(resolve));
  process.off('warning', warned);
  assert.deepEqual(warnings, []);
  assert.equal(process.listenerCount('SIGINT'), before);
});

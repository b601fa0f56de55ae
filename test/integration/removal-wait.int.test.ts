// upscope-tests: alone (while its removal waits, the kernel holds up the removal of every uprobe of the system, other tests' too).
// A removal of probes that waits on the kernel is said. The removal of a uprobe waits until no
// return trampoline holds on to uprobes (synchronize_srcu on the kernel's uretprobes_srcu,
// every uprobe of the system), and a thread in a call under a return probe that never returns
// holds on for as long as it goes on calling functions with return probes. On bpf upscope's
// own links no longer wait so (calls.int.test.ts); on tracefs they still do (README).
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, afterEach, test } from 'node:test';
import { compileProgram } from '../helpers/compile.js';
import { leftovers } from '../helpers/leftovers.js';
import { requireHost } from '../helpers/require-host.js';
import { ended, spawnCollected, trampolineRun, waitFor } from '../helpers/spawned.js';

const work = mkdtempSync(join(tmpdir(), 'upscope-removal-test-'));
after(() => rmSync(work, { recursive: true, force: true }));

afterEach(() => {
  assert.deepEqual(leftovers(), [], 'nothing of upscope is left in tracefs');
});

test('tracefs: record -p of a process whose thread never returns and calls probed functions of two files: the removal waits on the kernel until the program ends, and says so after 3 s', async (t) => {
  if (!requireHost(t, { root: true, commands: ['gcc'] })) return;
  const app = compileProgram('calls-target', { flags: ['-O2', '-g'], link: ['-lpthread'] });
  // The kernel disables tracefs events one at a time and holds a lock while each waits:
  // no order ends the wait (README). It must not be silent.
  const target = spawnCollected(app, ['spin']);
  let killedAt: number | undefined;
  try {
    await waitFor(target, /^ready$/m, 'stdout');
    const run = await trampolineRun('record', target.pid, 'tracefs', 1, [
      '-o',
      join(work, 'rec'),
      `${app}:spinner`,
      `${app}:rec`,
      'libc:pthread_mutex_lock',
    ]);
    target.child.kill('SIGUSR1');
    await waitFor(run, /^upscope: still removing the probes after 3 s: .*--return-probes sites/m);
    assert.equal(run.child.exitCode, null, 'upscope waits');
    killedAt = Date.now();
    target.child.kill('SIGKILL');
    const exit = await ended(run, 60_000);
    assert.equal(exit.code, 0, run.stderr);
    assert.ok(Date.now() - killedAt < 10_000, 'upscope ended once the program was killed');
  } finally {
    target.child.kill('SIGKILL');
    await target.exited;
  }
});

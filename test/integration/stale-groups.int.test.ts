// upscope-tests: alone (it makes groups of dead owners, which other files would take for leftovers).
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { test } from 'node:test';
import { cleanStaleGroups } from '../../src/engines/tracefs/index.js';
import { ensureTracefs } from '../../src/host/index.js';
import { compileProgram } from '../helpers/compile.js';
import { requireHost } from '../helpers/require-host.js';
import { readelfFileOffset, tool } from '../helpers/tools.js';

/** Run a shell command against tracefs by hand (not through our code); true when it worked. */
function sh(command: string): boolean {
  return spawnSync('sh', ['-c', command], { stdio: 'ignore' }).status === 0;
}

function groupsListed(tracefs: string): string[] {
  return readFileSync(`${tracefs}/uprobe_events`, 'utf8')
    .split('\n')
    .map((line) => /^[pr]:([^/]+)\//.exec(line)?.[1])
    .filter((group): group is string => group !== undefined);
}

/** The pid of a process that has exited. */
function deadPid(): number {
  const child = spawnSync('true');
  assert.ok(child.pid !== undefined && child.pid > 0);
  assert.equal(existsSync(`/proc/${child.pid}`), false, 'the pid is free');
  return child.pid;
}

test('cleanStaleGroups() removes upscope groups and instances of dead owners, and nothing else', (t) => {
  if (!requireHost(t, { root: true, commands: ['gcc', 'nm', 'readelf'] })) return;
  const tracefs = ensureTracefs();
  const program = compileProgram('tfs-counter', { flags: ['-O1'] });
  const row = tool('nm', [program])
    .split('\n')
    .find((line) => line.endsWith(' tfs_add'))!;
  const offset = readelfFileOffset(program, BigInt(`0x${row.split(' ')[0]}`)).toString(16);
  const where = `${program}:0x${offset}`;
  const dead = deadPid();
  const mine = process.pid;
  const staleGroup = `upscope_${dead}`;
  const liveGroup = `upscope_${mine}`;
  const foreignGroup = `othertool_${mine}`;
  const testGroup = `upscope_test_${dead}`;
  const events = [
    `${staleGroup}/stale_a`,
    `${staleGroup}/stale_b`,
    `${liveGroup}/live`,
    `${foreignGroup}/foreign`,
    `${testGroup}/lookalike`,
  ];
  const instances = [
    `upscope_${dead}`,
    `upscope_${dead}_2`,
    `upscope_${mine}_9`,
    `othertool_${dead}`,
  ];
  const uprobeEvents = `${tracefs}/uprobe_events`;
  try {
    for (const event of events) {
      assert.ok(sh(`echo 'p:${event} ${where}' >> ${uprobeEvents}`), `defined ${event}`);
    }
    for (const instance of instances) {
      assert.ok(sh(`mkdir ${tracefs}/instances/${instance}`), `made ${instance}`);
    }
    // A crashed session had its events enabled in its instance.
    assert.ok(
      sh(`echo 1 > ${tracefs}/instances/upscope_${dead}/events/${staleGroup}/stale_a/enable`),
    );

    const result = cleanStaleGroups(tracefs);

    assert.ok(result.removedGroups.includes(staleGroup), JSON.stringify(result));
    assert.ok(result.removedInstances.includes(`upscope_${dead}`));
    assert.ok(result.removedInstances.includes(`upscope_${dead}_2`));
    assert.deepEqual(result.failures, []);
    const groups = groupsListed(tracefs);
    assert.equal(groups.includes(staleGroup), false, 'the dead owner group is gone');
    for (const kept of [liveGroup, foreignGroup, testGroup]) {
      assert.ok(groups.includes(kept), `${kept} is kept`);
      assert.equal(result.removedGroups.includes(kept), false);
    }
    assert.equal(existsSync(`${tracefs}/instances/upscope_${dead}`), false);
    assert.equal(existsSync(`${tracefs}/instances/upscope_${dead}_2`), false);
    assert.ok(existsSync(`${tracefs}/instances/upscope_${mine}_9`), 'a live owner instance stays');
    assert.ok(existsSync(`${tracefs}/instances/othertool_${dead}`), 'a foreign instance stays');

    // A second run finds nothing more of its own to remove.
    const again = cleanStaleGroups(tracefs);
    assert.equal(again.removedGroups.includes(staleGroup), false);
    assert.deepEqual(again.failures, []);
  } finally {
    for (const instance of instances) sh(`rmdir ${tracefs}/instances/${instance} 2>/dev/null`);
    for (const event of events) sh(`echo '-:${event}' >> ${uprobeEvents} 2>/dev/null`);
    const left = groupsListed(tracefs);
    for (const group of [staleGroup, liveGroup, foreignGroup, testGroup]) {
      assert.equal(left.includes(group), false, `nothing of ${group} is left`);
    }
    for (const instance of instances) {
      assert.equal(existsSync(`${tracefs}/instances/${instance}`), false, `${instance} is gone`);
    }
  }
});

test('cleanStaleGroups() asks the given isAlive() about each owner pid', (t) => {
  if (!requireHost(t, { root: true, commands: [] })) return;
  const tracefs = ensureTracefs();
  const dead = deadPid();
  const instance = `upscope_${dead}`;
  try {
    assert.ok(sh(`mkdir ${tracefs}/instances/${instance}`));
    const asked: number[] = [];
    const kept = cleanStaleGroups(tracefs, {
      isAlive: (pid) => {
        asked.push(pid);
        return true;
      },
    });
    assert.ok(asked.includes(dead));
    assert.equal(kept.removedInstances.includes(instance), false);
    assert.ok(existsSync(`${tracefs}/instances/${instance}`));
    const removed = cleanStaleGroups(tracefs, { isAlive: (pid) => pid !== dead });
    assert.deepEqual(removed.removedInstances, [instance]);
  } finally {
    sh(`rmdir ${tracefs}/instances/${instance} 2>/dev/null`);
    assert.equal(existsSync(`${tracefs}/instances/${instance}`), false);
  }
});

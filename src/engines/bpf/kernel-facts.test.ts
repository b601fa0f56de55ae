import assert from 'node:assert/strict';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { requireHost } from '../../../test/helpers/require-host.js';
import { tool } from '../../../test/helpers/tools.js';
import { factsPath, loadKernelFacts } from './kernel-facts.js';

const VMLINUX = '/sys/kernel/btf/vmlinux';

describe('kernel facts', () => {
  test('equal bpftool’s dump of the kernel’s BTF, are kept for the build, and a kept one is taken as it is', (t) => {
    if (!requireHost(t, { commands: ['bpftool'] })) return;
    const raw = tool('bpftool', ['btf', 'dump', 'file', VMLINUX, 'format', 'raw']);
    const task = /STRUCT 'task_struct' size=\d+ vlen=\d+\n((?:\t.*\n)+)/.exec(raw);
    const pid = /\t'pid' type_id=\d+ bits_offset=(\d+)/.exec(task?.[1] ?? '');
    assert.ok(pid !== null, 'bpftool shows task_struct.pid');
    const tgid = /\t'tgid' type_id=\d+ bits_offset=(\d+)/.exec(task?.[1] ?? '');
    assert.ok(tgid !== null, 'bpftool shows task_struct.tgid');
    const mm = /\t'mm' type_id=\d+ bits_offset=(\d+)/.exec(task?.[1] ?? '');
    assert.ok(mm !== null, 'bpftool shows task_struct.mm');
    // "[N] TYPEDEF 'btf_trace_sched_process_exit' type_id=P", P a pointer to a prototype
    // whose first parameter is the tracepoint's data.
    const typedef = /TYPEDEF 'btf_trace_sched_process_exit' type_id=(\d+)/.exec(raw);
    const pointer = new RegExp(`^\\[${typedef?.[1]}\\] PTR '\\(anon\\)' type_id=(\\d+)$`, 'm').exec(
      raw,
    );
    const prototype = new RegExp(`^\\[${pointer?.[1]}\\] FUNC_PROTO .* vlen=(\\d+)$`, 'm').exec(
      raw,
    );
    assert.ok(prototype !== null, 'bpftool shows the exit tracepoint’s prototype');
    const kfunc = /^\[(\d+)\] FUNC 'bpf_session_is_return' type_id=\d+/m.exec(raw);

    const dir = mkdtempSync(join(tmpdir(), 'upscope-facts-'));
    try {
      const facts = loadKernelFacts(dir);
      assert.equal(facts.taskPid, Number(pid[1]) / 8);
      assert.equal(facts.taskTgid, Number(tgid[1]) / 8);
      assert.equal(facts.exitArgs, Number(prototype[1]) - 1);
      assert.equal(facts.sessionKfunc?.btfId ?? null, kfunc === null ? null : Number(kfunc[1]));
      // The stack walker's members, all found (btf.test checks each against bpftool).
      assert.ok(!('missing' in facts.walker), JSON.stringify(facts.walker));
      assert.equal(Object.keys(facts.walker).length, 19);
      assert.equal((facts.walker as { taskMm: number }).taskMm, Number(mm[1]) / 8);

      // Kept under this kernel's name, the only one there.
      const path = factsPath(dir)!;
      assert.deepEqual(readdirSync(dir), [path.split('/').pop()]);
      assert.deepEqual(JSON.parse(readFileSync(path, 'utf8')), facts);

      // What is kept is taken without reading the BTF again (a changed number shows it).
      writeFileSync(path, JSON.stringify({ ...facts, taskPid: 8 }));
      assert.equal(loadKernelFacts(dir).taskPid, 8);
      // A file that is not the facts of this format is read again from the BTF.
      for (const bad of [
        '{',
        JSON.stringify({ ...facts, format: 0 }),
        JSON.stringify({ ...facts, walker: { vmStart: 0 } }),
        '{"taskPid":"x"}',
      ]) {
        writeFileSync(path, bad);
        assert.deepEqual(loadKernelFacts(dir), facts, bad);
      }
      // Those of another kernel go when this one's are kept.
      writeFileSync(join(dir, 'kernel-0123456789abcdef01234567.json'), '{}');
      rmSync(path);
      loadKernelFacts(dir);
      assert.deepEqual(readdirSync(dir), [path.split('/').pop()]);

      // Nowhere to keep them: read, not kept.
      assert.deepEqual(loadKernelFacts(undefined), facts);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

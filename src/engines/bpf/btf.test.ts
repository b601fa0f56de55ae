import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { describe, test } from 'node:test';
import { requireHost } from '../../../test/helpers/require-host.js';
import { tool } from '../../../test/helpers/tools.js';
import { BPF_FUNC } from '../../native/index.js';
import { Asm } from './asm.js';
import { KernelBtf } from './btf.js';
import { alu64Imm, call, mov64Imm, mov64Reg } from './insn.js';
import { closeFd, loadProgram } from './kernel.js';

const VMLINUX = '/sys/kernel/btf/vmlinux';

describe('KernelBtf', () => {
  test('member offsets equal bpftool’s dump of the kernel’s BTF', (t) => {
    if (!requireHost(t, { commands: ['bpftool'] })) return;
    if (!existsSync(VMLINUX)) {
      assert.fail(`${VMLINUX} is missing: the kernel has no BTF`);
    }
    const raw = tool('bpftool', ['btf', 'dump', 'file', VMLINUX, 'format', 'raw']);
    const btf = KernelBtf.vmlinux();
    const wanted: [string, string][] = [
      ['vm_area_struct', 'vm_pgoff'],
      ['vm_area_struct', 'vm_file'],
      ['file', 'f_inode'],
      ['inode', 'i_ino'],
      ['inode', 'i_sb'],
      ['super_block', 's_dev'],
      ['task_struct', 'mm'],
      ['uprobe_task', 'return_instances'],
      ['return_instance', 'stack'],
      ['return_instance', 'orig_ret_vaddr'],
      ['return_instance', 'next'],
    ];
    for (const [struct, member] of wanted) {
      // "[ID] STRUCT 'name' size=N vlen=M", then one line per member with its bits_offset.
      const block = new RegExp(`STRUCT '${struct}' size=\\d+ vlen=\\d+\\n((?:\\t.*\\n)+)`).exec(
        raw,
      );
      assert.ok(block !== null, `bpftool shows struct ${struct}`);
      const line = new RegExp(`'${member}' type_id=\\d+ bits_offset=(\\d+)`).exec(block[1]!);
      assert.ok(line !== null, `bpftool shows ${struct}.${member}`);
      assert.equal(btf.offsetOf(struct, member), Number(line[1]) / 8, `${struct}.${member}`);
    }
    // A member of an anonymous union (vm_start shares its place with an RCU head).
    assert.equal(btf.offsetOf('vm_area_struct', 'vm_start'), 0);
  });
});

describe('programs with subprograms', () => {
  test('a program with a bpf_loop callback loads: its subprograms are named in BTF made for it', (t) => {
    if (!requireHost(t, { root: true })) return;
    const a = new Asm();
    a.emit(mov64Imm(1, 4));
    a.loadCallback(2, 'step');
    a.emit(mov64Imm(3, 0), mov64Imm(4, 0), call(BPF_FUNC.loop));
    a.returnZero();
    a.subprogram('step', 2);
    a.emit(mov64Reg(0, 1), alu64Imm('AND', 0, 0));
    a.returnZero();
    assert.deepEqual(
      a.subprograms.map((s) => s.name),
      ['main', 'step'],
    );
    const fd = loadProgram(a.finish(), {
      name: 'upscope_test',
      purpose: 'a test',
      subprograms: a.subprograms,
    });
    closeFd(fd);
  });
});

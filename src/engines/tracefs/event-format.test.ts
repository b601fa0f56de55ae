import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  HEADER_PAGE,
  PRINT_FORMAT,
  SCHED_SWITCH_FORMAT,
  UPROBE_FORMAT,
} from '../../../test/fixtures/tracefs-texts.js';
import { ProbeError } from '../../errors/index.js';
import { parseEventFormat, parseHeaderPage } from './event-format.js';

function rejects(fn: () => unknown, pattern: RegExp): void {
  assert.throws(fn, (err: unknown) => {
    assert.ok(err instanceof ProbeError, `a ProbeError, not ${String(err)}`);
    assert.equal(err.code, 'ERR_TRACEFS_FORMAT');
    assert.match(err.message, pattern);
    return true;
  });
}

test('parseEventFormat() reads a uprobe event: name, id, common and own fields', () => {
  const format = parseEventFormat(UPROBE_FORMAT);
  assert.equal(format.name, 'ev');
  assert.equal(format.id, 2326);
  assert.deepEqual(
    format.fields.map((f) => [f.name, f.type, f.offset, f.sizeBytes, f.signed, f.common]),
    [
      ['common_type', 'unsigned short', 0, 2, false, true],
      ['common_flags', 'unsigned char', 2, 1, false, true],
      ['common_preempt_count', 'unsigned char', 3, 1, false, true],
      ['common_pid', 'int', 4, 4, true, true],
      ['__probe_ip', 'unsigned long', 8, 8, false, false],
      ['a', 's32', 16, 4, true, false],
      ['b', 'u64', 20, 8, false, false],
      ['s', '__data_loc char[]', 28, 4, true, false],
      ['c', 'u32', 32, 4, false, false],
      ['d', 's8', 36, 1, true, false],
      ['e', 'u16', 37, 2, false, false],
    ],
  );
  const s = format.fields.find((f) => f.name === 's')!;
  assert.equal(s.location, 'data_loc');
  assert.equal(s.elementType, 'char');
  assert.ok(format.fields.filter((f) => f.name !== 's').every((f) => f.location === 'static'));
});

test('parseEventFormat() reads fixed and flexible arrays with their element type', () => {
  const sched = parseEventFormat(SCHED_SWITCH_FORMAT);
  const comm = sched.fields.find((f) => f.name === 'prev_comm')!;
  assert.deepEqual(
    [comm.type, comm.arrayLength, comm.elementType, comm.sizeBytes],
    ['char[16]', 16, 'char', 16],
  );
  const buf = parseEventFormat(PRINT_FORMAT).fields.find((f) => f.name === 'buf')!;
  assert.deepEqual(
    [buf.type, buf.arrayLength, buf.elementType, buf.sizeBytes],
    ['char[]', undefined, 'char', 0],
  );
});

test('parseEventFormat() reads __rel_loc fields and lines without signed:', () => {
  const text = `name: x\nID: 7\nformat:\n\tfield:unsigned short common_type;\toffset:0;\tsize:2;\n\tfield:__rel_loc u64[] v;\toffset:8;\tsize:4;\tsigned:0;\n`;
  const [type, v] = parseEventFormat(text).fields;
  assert.equal(type!.signed, false);
  assert.deepEqual([v!.location, v!.type, v!.elementType], ['rel_loc', '__rel_loc u64[]', 'u64']);
});

test('parseEventFormat() rejects broken text with a clear message', () => {
  rejects(() => parseEventFormat(''), /^Cannot parse event format: no "name:" line$/);
  rejects(() => parseEventFormat('name: x\n'), /event format of "x": no "ID:" line/);
  rejects(() => parseEventFormat('name: x\nID: 12a\n'), /ID "12a" is not a number/);
  rejects(() => parseEventFormat('name: x\nID: 99999\n'), /ID "99999" is not a number up to 65535/);
  rejects(() => parseEventFormat('name: x\nID: 1\nformat:\n'), /no "field:" lines/);
  rejects(
    () => parseEventFormat('name: x\nID: 1\n\tfield:int a;\toffset:zero;\tsize:4;\n'),
    /\(line 3\): field line "field:int a;\toffset:zero;\tsize:4;" is not/,
  );
  rejects(
    () => parseEventFormat('name: x\nID: 1\n\tfield:int a;\toffset:99999999999;\tsize:4;\n'),
    /beyond any record/,
  );
  rejects(
    () =>
      parseEventFormat(
        'name: x\nID: 1\n\tfield:int a;\toffset:0;\tsize:4;\n\tfield:int a;\toffset:4;\tsize:4;\n',
      ),
    /field "a" appears twice/,
  );
  rejects(
    () => parseEventFormat('name: x\nID: 1\n\tfield:__data_loc char[] s;\toffset:0;\tsize:8;\n'),
    /dynamic field "s" has size 8, not 4/,
  );
  rejects(
    () => parseEventFormat('name: x\nID: 1\n\tfield:[];\toffset:0;\tsize:8;\n'),
    /declaration "\[\]" has no type and name/,
  );
});

test('parseHeaderPage() reads the offsets and sizes of the page header', () => {
  const header = parseHeaderPage(HEADER_PAGE);
  assert.deepEqual(header.timestamp, { offset: 0, sizeBytes: 8, signed: false });
  assert.deepEqual(header.commit, { offset: 8, sizeBytes: 8, signed: true });
  assert.deepEqual(header.overwrite, { offset: 8, sizeBytes: 1, signed: true });
  assert.deepEqual(header.data, { offset: 16, sizeBytes: 4080, signed: false });
});

test('parseHeaderPage() reads a 32-bit kernel layout with a 4-byte commit', () => {
  const text = HEADER_PAGE.replace('size:8;\tsigned:1', 'size:4;\tsigned:1').replace(
    'offset:16;\tsize:4080',
    'offset:12;\tsize:4084',
  );
  const header = parseHeaderPage(text);
  assert.deepEqual([header.commit.sizeBytes, header.data.offset], [4, 12]);
});

test('parseHeaderPage() rejects a missing, mis-sized or overlapping field', () => {
  rejects(
    () => parseHeaderPage(''),
    /^Cannot parse ring-buffer header_page: no "timestamp" field$/,
  );
  rejects(() => parseHeaderPage(HEADER_PAGE.replace(/.*data;.*\n/, '')), /no "data" field/);
  rejects(
    () => parseHeaderPage(HEADER_PAGE.replace('offset:0;\tsize:8', 'offset:0;\tsize:4')),
    /timestamp is 4 bytes, not 8/,
  );
  rejects(
    () => parseHeaderPage(HEADER_PAGE.replace('offset:8;\tsize:8', 'offset:8;\tsize:2')),
    /commit is 2 bytes, not 4 or 8/,
  );
  rejects(() => parseHeaderPage(HEADER_PAGE.replace('offset:16;', 'offset:12;')), /overlap/);
  rejects(
    () => parseHeaderPage(HEADER_PAGE.replace('offset:8;\tsize:8', 'offset:4;\tsize:8')),
    /overlap/,
  );
});

test('parseEventFormat() never throws anything but ProbeError on mangled text', () => {
  let seed = 7;
  const random = (): number => {
    seed = (seed * 1103515245 + 12345) >>> 0;
    return seed;
  };
  const pieces = [':', ';', '\t', '\n', ' ', '[', ']', '0', '99999999999999999999', 'field:', 'x'];
  for (let i = 0; i < 3000; i++) {
    const chars = [...UPROBE_FORMAT];
    for (let k = random() % 6; k >= 0; k--) {
      const at = random() % chars.length;
      if (random() % 2 === 0) chars.splice(at, 1 + (random() % 10));
      else chars.splice(at, 0, pieces[random() % pieces.length]!);
    }
    try {
      parseEventFormat(chars.join(''));
    } catch (err) {
      assert.ok(err instanceof ProbeError, `text ${i}: ${String(err)}`);
    }
  }
});

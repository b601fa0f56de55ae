import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { appendFileSync, existsSync, readFileSync, realpathSync } from 'node:fs';
import { after, test } from 'node:test';
import { compileProgram } from '../helpers/compile.js';
import { requireHost } from '../helpers/require-host.js';
import { runCli } from '../helpers/run-cli.js';
import { compileUsdtTarget, requireSdt } from '../helpers/usdt.js';

const TRACEFS = '/sys/kernel/tracing';
const EVENTS = `${TRACEFS}/uprobe_events`;
const SAMPLE = new URL('../../sample/app.c', import.meta.url).pathname;
/** This test's own event group: nothing else is ever touched. */
const GROUP = `upscope_test_${process.pid}`;

/** Every event of our group still defined. */
function ourEvents(): string[] {
  return readFileSync(EVENTS, 'utf8')
    .split('\n')
    .filter((line) => line.includes(`:${GROUP}/`));
}

after(() => {
  if (!existsSync(EVENTS)) return;
  for (const line of ourEvents()) {
    const name = /^[pr]:(\S+)/.exec(line)?.[1];
    if (name !== undefined) appendFileSync(EVENTS, `-:${name}\n`);
  }
  assert.deepEqual(ourEvents(), [], 'no event of this test is left in uprobe_events');
});

/**
 * Resolve the specs, write each uprobe_events line resolve prints to the kernel (in this test's
 * own group, under a unique name) and check that the kernel takes each one as written.
 */
function acceptedByKernel(specs: readonly string[]): void {
  const result = runCli(['resolve', '--json', ...specs]);
  assert.equal(result.status, 0, result.stderr);
  const sites: { uprobeEvent: string }[] = JSON.parse(result.stdout).sites;
  assert.equal(sites.length, specs.length);
  const tag = `_${++written}`;
  sites.forEach((site, i) => {
    // Our own group and a unique event name; the rest of the line exactly as printed.
    const line = site.uprobeEvent.replace(
      /^([pr]):upscope_\d+\/(\S+)/,
      `$1:${GROUP}/$2${tag}_${i}`,
    );
    try {
      appendFileSync(EVENTS, `${line}\n`);
    } catch (err) {
      const log = existsSync(`${TRACEFS}/error_log`)
        ? readFileSync(`${TRACEFS}/error_log`, 'utf8')
        : '';
      assert.fail(`the kernel refused "${line}": ${(err as Error).message}\n${log.slice(-600)}`);
    }
  });
  const defined = ourEvents().filter((line) => line.includes(`${tag}_`));
  assert.equal(defined.length, specs.length, defined.join('\n'));
  // The kernel lists each event at the file offset we computed (it pads it to 16 digits).
  sites.forEach((site, i) => {
    const [, path, offset] = /^\S+ ([^ :]+):0x([0-9a-f]+)/.exec(site.uprobeEvent)!;
    const listed = defined.find((line) =>
      line.includes(`/${/\/(\S+?) /.exec(site.uprobeEvent)![1]}${tag}_${i} `),
    );
    assert.ok(listed, `event ${i} is listed`);
    assert.ok(listed.includes(` ${path}:0x${offset!.padStart(16, '0')}`), listed);
  });
}

let written = 0;

test('the uprobe_events line resolve prints is accepted by the kernel as written', (t) => {
  if (!requireHost(t, { root: true, commands: ['gcc'] })) return;
  // doctor mounts tracefs when it is missing (it may not be on a fresh machine).
  runCli(['doctor']);
  assert.ok(existsSync(EVENTS), 'tracefs is mounted with uprobe_events');
  const app = compileProgram(SAMPLE, { flags: ['-O2'] });
  acceptedByKernel([
    `${app}:parse_request line=+0(arg0):string req=arg1:x64`,
    `${app}:checksum len=arg1:u64 first=+0(arg0):u8 low=%si:u16 ah=%ah who=comm`,
    `r:${app}:checksum hash=retval:x64`,
    `${app}:handle_request size=+72(arg0):s64 sp=sp ip=ip`,
    'libc:malloc size=arg0:u64 seventh=arg6:u64',
    'r:libc:malloc ptr=retval:ptr',
  ]);
});

test('strings at a register, an argument, a return value or a USDT argument: lines the kernel takes', (t) => {
  if (!requireSdt(t) || !requireHost(t, { root: true, commands: ['gcc', 'readelf'] })) return;
  runCli(['doctor']);
  const app = compileProgram(SAMPLE, { flags: ['-O2'] });
  const specs = [
    `${app}:parse_request line=arg0:string text=%rdi:ustring`,
    `r:${app}:handle_request response=retval:string`,
    'libc:malloc seventh=arg6:string',
    `${app}:checksum at=ip:string`,
  ];
  // A string argument in a register (-O2) and in a stack slot (-O0).
  for (const opt of ['-O0', '-O2'] as const) {
    const usdt = compileUsdtTarget(opt);
    specs.push(`u:${usdt}:usdt:text word=arg0:string`);
  }
  // python3's function__entry holds its strings in registers (Debian's python3 has the probe).
  const python = existsSync('/usr/bin/python3') ? realpathSync('/usr/bin/python3') : undefined;
  const notes =
    python === undefined ? '' : execFileSync('readelf', ['-n', python], { encoding: 'utf8' });
  if (/Name: function__entry\n/.test(notes)) {
    specs.push(`u:${python}:python:function__entry file=arg0:string fn=arg1:string line=arg2`);
  }
  acceptedByKernel(specs);
});

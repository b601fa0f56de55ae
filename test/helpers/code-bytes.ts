import { execFileSync } from 'node:child_process';
import { closeSync, openSync, readFileSync, readSync } from 'node:fs';

/** A defined function's address in the file (nm's `T` symbol). */
function symbolVaddr(app: string, symbol: string): bigint {
  const nm = execFileSync('nm', [app], { encoding: 'utf8' });
  const m = new RegExp(`^([0-9a-f]+) T ${symbol}$`, 'm').exec(nm);
  if (m === null) throw new Error(`nm lists no function ${symbol} in ${app}`);
  return BigInt(`0x${m[1]}`);
}

/** The file's bytes at a symbol's entry (objdump's view of the file, not ours). */
export function symbolBytes(app: string, symbol: string, length: number): Buffer {
  const vaddr = symbolVaddr(app, symbol);
  const dump = execFileSync(
    'objdump',
    [
      '-s',
      `--start-address=${vaddr}`,
      `--stop-address=${vaddr + BigInt(length)}`,
      '-j',
      '.text',
      app,
    ],
    { encoding: 'utf8' },
  );
  const hex = dump
    .split('\n')
    .filter((l) => /^ [0-9a-f]+ /.test(l))
    .map((l) => l.slice(1).split(' ').slice(1, 5).join(''))
    .join('');
  return Buffer.from(hex, 'hex').subarray(0, length);
}

/** A running PIE process's bytes at `symbol` (its load address from /proc/PID/maps). */
export function processBytes(pid: number, app: string, symbol: string, length: number): Buffer {
  const vaddr = symbolVaddr(app, symbol);
  const maps = readFileSync(`/proc/${pid}/maps`, 'utf8');
  const first = maps.split('\n').find((l) => l.endsWith(app))!;
  const base = BigInt(`0x${first.split('-')[0]}`);
  const out = Buffer.alloc(length);
  const fd = openSync(`/proc/${pid}/mem`, 'r');
  try {
    readSync(fd, out, 0, length, Number(base + vaddr));
  } finally {
    closeSync(fd);
  }
  return out;
}

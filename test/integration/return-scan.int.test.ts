// The returns of a large pattern's functions found ahead on a worker (src/plan/return-scan.ts)
// against those the planning finds itself: every other function of node planned with
// --return-probes=sites both ways must give the same exits (address, kind, instruction, its
// bytes, its target) or the same refusal; and the worker must really have scanned them (a
// worker that never answered would pass the comparison). node's functions are of many kinds:
// with a .cold part, jump tables, calls that never return.
import assert from 'node:assert/strict';
import { existsSync, statSync } from 'node:fs';
import { test } from 'node:test';
import { MessageChannel, receiveMessageOnPort, Worker } from 'node:worker_threads';
import { findReturnInstructions } from '../../src/arch/index.js';
import { ProbeError } from '../../src/errors/index.js';
import { callingConvention } from '../../src/plan/calling-convention.js';
import { codeRanges, planReturns, type ReturnPlanContext } from '../../src/plan/return-plan.js';
import { ReturnScanAhead } from '../../src/plan/return-scan.js';
import {
  SCAN_BATCH,
  SCAN_PROGRESS,
  type ScanRequest,
  type ScanResults,
} from '../../src/plan/return-scan-protocol.js';
import { type FunctionSymbol, openElf, SymbolIndex } from '../../src/symbols/index.js';

/** What a plan of a function's returns says, or why it was refused. */
function said(fn: FunctionSymbol, context: ReturnPlanContext): string[] | string {
  try {
    const plan = planReturns(fn, fn.vaddr, context, { text: 'r:*', span: { start: 0, end: 3 } });
    return plan.sites.map(
      (site) =>
        `${site.vaddr.toString(16)} ${site.fileOffset.toString(16)} ${site.kind} ${site.text} ${site.handling.strategy}`,
    );
  } catch (err) {
    if (!(err instanceof ProbeError)) throw err;
    return `${err.code} ${err.message}`;
  }
}

function compare(path: string): {
  functions: number;
  withColdParts: number;
  refused: number;
  exits: number;
} {
  const elf = openElf(path);
  try {
    const symbols = new SymbolIndex(elf);
    const functions: FunctionSymbol[] = [];
    const seen = new Set<bigint>();
    // Every other function (the suite's time): still tens of thousands, many batches.
    for (let k = 0; k < symbols.length; k += 2) {
      const fn = symbols.function(k);
      if (fn.type !== 'func' || fn.sizeBytes === 0n || seen.has(fn.vaddr)) continue;
      if (!elf.loadSegmentOf(fn.vaddr)?.executable) continue;
      seen.add(fn.vaddr);
      functions.push(fn);
    }
    const stat = statSync(path, { bigint: true });
    const ahead = ReturnScanAhead.start({ path, dev: stat.dev, inode: stat.ino }, functions, (fn) =>
      codeRanges(fn, elf, symbols),
    );
    assert.ok(ahead !== undefined, 'the worker did not start');
    try {
      const base = {
        elf,
        symbols,
        displayPath: path,
        goProgram: false,
        convention: callingConvention(undefined, functions[0]!),
        unwinder: () => 'it links an unwinder',
        hasUnwindInfo: () => true,
        mode: 'sites' as const,
        kernelEngine: true,
        kernel: { major: 6, minor: 8 },
      };
      let asked = 0;
      let scanned = 0;
      const fromWorker: ReturnPlanContext = {
        ...base,
        scannedAhead: (fn) => {
          asked++;
          const scan = ahead.scanOf(fn, elf);
          if (scan !== undefined) scanned++;
          return scan;
        },
      };
      let refused = 0;
      let exits = 0;
      for (const fn of functions) {
        const here = said(fn, base);
        assert.deepEqual(said(fn, fromWorker), here, `${path} ${fn.name}`);
        if (typeof here === 'string') refused++;
        else exits += here.length;
      }
      // All but those refused before their code is read (the program's entry point).
      assert.ok(asked > functions.length - 10, `${path}: ${asked} functions scanned`);
      assert.equal(scanned, asked, `${path}: functions the worker scanned`);
      const withColdParts = functions.filter(
        (fn) => codeRanges(fn, elf, symbols).length > 1,
      ).length;
      return { functions: functions.length, withColdParts, refused, exits };
    } finally {
      ahead.close();
    }
  } finally {
    elf.close();
  }
}

test("a worker finds the functions' returns as the planning does: every other function of node", () => {
  const tally = compare('/usr/bin/node');
  console.log(`/usr/bin/node: ${JSON.stringify(tally)}`);
  assert.ok(tally.functions > 30_000 && tally.refused > 100 && tally.exits > tally.functions);
  assert.ok(tally.withColdParts > 100);
});

test('a worker given another file than the one planned scans nothing: the planning does it', () => {
  const path = '/usr/lib/x86_64-linux-gnu/libstdc++.so.6';
  const elf = openElf(path);
  try {
    const symbols = new SymbolIndex(elf);
    const fn = symbols.function(symbols.length - 1);
    const stat = statSync(path, { bigint: true });
    const ahead = ReturnScanAhead.start({ path, dev: stat.dev, inode: stat.ino + 1n }, [fn], (f) =>
      codeRanges(f, elf, symbols),
    );
    assert.ok(ahead !== undefined);
    try {
      assert.equal(ahead.scanOf(fn, elf), undefined);
    } finally {
      ahead.close();
    }
  } finally {
    elf.close();
  }
});

test("the command's bundled worker (dist/return-scan-worker.js, beside dist/cli.cjs) scans as the planning does", async () => {
  const bundle = new URL('../../dist/cli.cjs', import.meta.url);
  const worker = new URL('./return-scan-worker.js', bundle);
  assert.ok(existsSync(worker), `${worker.pathname} is missing: npm run build makes it`);
  const path = '/usr/bin/node';
  const elf = openElf(path);
  try {
    const symbols = new SymbolIndex(elf);
    // Functions with a jump table, a tail call and a .cold part among them.
    const functions: FunctionSymbol[] = [];
    for (let k = 0; k < symbols.length && functions.length < 3000; k += 13) {
      const fn = symbols.function(k);
      if (fn.type === 'func' && fn.sizeBytes > 0n && !fn.name.endsWith('.cold')) {
        functions.push(fn);
      }
    }
    const starts = new Uint32Array(functions.length + 1);
    const parts: number[] = [];
    functions.forEach((fn, k) => {
      for (const range of codeRanges(fn, elf, symbols)) {
        parts.push(Number(range.vaddr), Number(range.fileOffset ?? 0n), Number(range.size));
      }
      starts[k + 1] = parts.length / 3;
    });
    const stat = statSync(path, { bigint: true });
    const progress = new Int32Array(new SharedArrayBuffer(SCAN_PROGRESS.size * 4));
    const { port1, port2 } = new MessageChannel();
    const request: ScanRequest = {
      path,
      dev: stat.dev,
      inode: stat.ino,
      starts,
      parts: Float64Array.from(parts),
      progress,
      port: port2,
    };
    const thread = new Worker(worker, { workerData: request, transferList: [port2] });
    const results: ScanResults[] = [];
    await new Promise<void>((resolve, reject) => {
      thread.on('error', reject);
      thread.on('exit', () => resolve());
    });
    for (let message = receiveMessageOnPort(port1); message !== undefined; ) {
      results.push(message.message as ScanResults);
      message = receiveMessageOnPort(port1);
    }
    port1.close();
    assert.equal(results.length, Math.ceil(functions.length / SCAN_BATCH));
    let exits = 0;
    for (const batch of results) {
      assert.equal(batch.type, 'results');
      batch.found.forEach((found, i) => {
        const fn = functions[batch.first + i]!;
        const own = findReturnInstructions(
          codeRanges(fn, elf, symbols).map((range) => ({
            vaddr: range.vaddr,
            bytes: elf.read(range.fileOffset!, Number(range.size)),
          })),
        );
        assert.equal(found === 1, own.ok, fn.name);
        if (!own.ok) return;
        const mine = Array.from(
          batch.exits.subarray(3 * (i === 0 ? 0 : batch.ends[i - 1]!), 3 * batch.ends[i]!),
        );
        const theirs = own.exits.flatMap((exit) => [
          Number(exit.instruction.vaddr),
          exit.instruction.length,
          exit.kind === 'ret' ? 0 : 1,
        ]);
        assert.deepEqual(mine, theirs, fn.name);
        exits += theirs.length / 3;
      });
    }
    assert.ok(exits > functions.length, `${exits} exits of ${functions.length} functions`);
  } finally {
    elf.close();
  }
});

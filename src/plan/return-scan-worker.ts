/**
 * The worker that finds the returns of a pattern's functions while the main thread plans
 * their entries (see return-scan.ts): findReturnInstructions() on each function's code, read
 * from the file opened again here, the results sent back a batch at a time.
 */
import { workerData } from 'node:worker_threads';
import { type CodePart, findReturnInstructions } from '../arch/index.js';
import { FileSource } from '../symbols/index.js';
import {
  SCAN_BATCH,
  SCAN_PROGRESS,
  type ScanMessage,
  type ScanRequest,
} from './return-scan-protocol.js';

const request = workerData as ScanRequest;

function post(message: ScanMessage, transfer: ArrayBuffer[] = []): void {
  request.port.postMessage(message, transfer);
  Atomics.add(request.progress, SCAN_PROGRESS.posted, 1);
  Atomics.notify(request.progress, SCAN_PROGRESS.posted);
}

function scan(reader: FileSource): void {
  const { starts, parts } = request;
  const count = starts.length - 1;
  for (let first = 0; first < count; first += SCAN_BATCH) {
    const n = Math.min(SCAN_BATCH, count - first);
    const found = new Uint8Array(n);
    const ends = new Uint32Array(n);
    const startJumps = new Float64Array(n).fill(-1);
    const exits: number[] = [];
    const failures: [number, string, number][] = [];
    for (let i = 0; i < n; i++) {
      const code: CodePart[] = [];
      for (let j = starts[first + i]!; j < starts[first + i + 1]!; j++) {
        const size = parts[3 * j + 2]!;
        code.push({
          vaddr: BigInt(parts[3 * j]!),
          bytes: size === 0 ? new Uint8Array(0) : reader.view(parts[3 * j + 1]!, size),
        });
      }
      const result = findReturnInstructions(code);
      if (result.ok) {
        found[i] = 1;
        if (result.startJump !== undefined) startJumps[i] = Number(result.startJump);
        for (const exit of result.exits) {
          exits.push(
            Number(exit.instruction.vaddr),
            exit.instruction.length,
            exit.kind === 'ret' ? 0 : 1,
          );
        }
      } else {
        failures.push([i, result.reason, result.at === undefined ? -1 : Number(result.at)]);
      }
      ends[i] = exits.length / 3;
    }
    const packed = Float64Array.from(exits);
    post({ type: 'results', first, found, ends, exits: packed, startJumps, failures }, [
      found.buffer,
      ends.buffer,
      packed.buffer,
      startJumps.buffer,
    ]);
  }
}

try {
  const source = new FileSource(request.path);
  try {
    if (source.dev !== request.dev || source.inode !== request.inode) {
      post({ type: 'unavailable', why: `${request.path} is not the file being planned` });
    } else {
      scan(source);
    }
  } finally {
    source.close();
  }
} catch (err) {
  post({ type: 'unavailable', why: err instanceof Error ? err.message : String(err) });
} finally {
  Atomics.store(request.progress, SCAN_PROGRESS.ended, 1);
  Atomics.notify(request.progress, SCAN_PROGRESS.posted);
}

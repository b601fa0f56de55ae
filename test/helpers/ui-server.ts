import { readdirSync, readlinkSync } from 'node:fs';
import { type Spawned, spawnUpscope, waitFor } from './spawned.js';

/** A running `upscope ui`: its process, its page's URL (with the token), its address parts. */
export interface RunningUi {
  readonly spawned: Spawned;
  readonly url: string;
  readonly origin: string;
  readonly port: number;
  readonly token: string;
}

/** Start `upscope ui ARGS...` and wait for the URL it prints. */
export async function startUi(args: readonly string[] = []): Promise<RunningUi> {
  const spawned = spawnUpscope(['ui', ...args]);
  const m = await waitFor(spawned, /^(http:\/\/([^/]+):(\d+))\/\?token=(\S+)$/m, 'stdout');
  return { spawned, url: m[0], origin: m[1]!, port: Number(m[3]), token: m[4]! };
}

/**
 * What a process holds of probes: its BPF objects and perf events (kernel uprobes attached by
 * the bpf engine), and its own upscope group in tracefs (tracefs uprobes).
 */
export function probesHeldBy(pid: number): string[] {
  const held: string[] = [];
  try {
    for (const fd of readdirSync(`/proc/${pid}/fd`)) {
      try {
        const link = readlinkSync(`/proc/${pid}/fd/${fd}`);
        if (/bpf|perf_event/.test(link)) held.push(`fd ${fd} ${link}`);
      } catch {
        // closed meanwhile
      }
    }
  } catch {
    return held; // the process is gone
  }
  return held;
}

/**
 * How the inject engine serves a resolved site: an inline hook (a `jmp` patched over the
 * function's first instructions, no trap per hit), or an int3 as the ptrace engine places
 * it, and why. The same decision ProcessTracer makes when it places the site, so that
 * `resolve --engine inject` says beforehand what will happen; what only the running process
 * can tell (a thread stopped inside the bytes, no page free within 2 GiB, another tracer's
 * int3 there) is said as a notice when it is placed.
 */
import { planEntryPatch } from '../arch/index.js';
import { type InlineReads, planInlineReads } from '../engines/index.js';
import type { ProbeSite } from '../plan/index.js';

/**
 * The memory an inline hook at `site` copies for its fetches (the fault-proof reads its
 * trampolines make: at the entry, or after a return for a return probe), or why it cannot
 * copy it (an int3 serves the site then).
 */
export function inlineReadsOf(
  site: ProbeSite,
): { readonly reads: InlineReads } | { readonly why: string; readonly fetch: string } {
  const at = site.kind === 'return' ? 'return' : 'entry';
  const plan = planInlineReads([...site.fetches, ...(site.optionFetches ?? [])], site.vaddr, at);
  if ('why' in plan) return plan;
  return {
    reads: at === 'return' ? { entry: [], return: plan.reads } : { entry: plan.reads, return: [] },
  };
}

/** How the inject engine serves a site. */
export interface InjectHook {
  readonly hook: 'inline' | 'int3';
  /** Why, in one line (`resolve --engine inject` shows it). */
  readonly why: string;
}

/**
 * How the inject engine will serve `site` (resolved for the ptrace engine, which gives the
 * jump targets near it). Returns through the return trampoline when its returns are planned
 * by swapping the return address; at the function's exits (Go, code an unwinder may pass
 * through) an int3 serves the entry and each exit: a `ret` is one byte, too short for the
 * 5-byte jump.
 */
export function injectHookOf(site: ProbeSite): InjectHook {
  const int3 = (why: string): InjectHook => ({ hook: 'int3', why });
  if (site.returns?.mode === 'sites') {
    return int3(
      `its returns are caught at the instructions it leaves by (${site.returns.why}), and a 1-byte ret has no room for a 5-byte jump: an int3 at its entry and at each exit (a trap per call and per return)`,
    );
  }
  if (site.kind !== 'entry' && site.kind !== 'return') {
    return int3('inline hooks serve function entries (and their returns) only');
  }
  const reads = inlineReadsOf(site);
  if ('why' in reads) return int3(`its fetch "${reads.fetch}": ${reads.why}`);
  const bytes = Uint8Array.from(site.instructions.flatMap((insn) => [...insn.bytes]));
  // Where the trampoline lands is known only in the process: within 2 GiB of the site.
  const plan = planEntryPatch(bytes, site.vaddr, site.vaddr, site.jumpTargetsNear);
  if (plan.kind === 'refuse') return int3(plan.reason);
  const returns =
    site.kind === 'return'
      ? '; its calls return through the return trampoline (the real return address kept on a per-thread shadow stack)'
      : '';
  const copied = [...reads.reads.entry, ...reads.reads.return];
  const copies =
    copied.length === 0
      ? ''
      : `; ${reads.reads.entry.length > 0 ? 'each entry' : 'each return'} copies the memory its fetches read (${copied.length} read${copied.length === 1 ? '' : 's'} of at most ${Math.max(...copied.map((r) => r.bytes))} bytes, with process_vm_readv(2): a page that cannot be read gives no value, never a fault)`;
  return {
    hook: 'inline',
    why: `a 5-byte jmp over its first ${plan.length} bytes (${plan.texts.join('; ')}), which run relocated in its trampoline${returns}${copies}`,
  };
}

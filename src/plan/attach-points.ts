import type { FetchArg, FetchExpr, Span } from '../spec/index.js';
import type { ProbeSite } from './probe-site.js';

/** One uprobe an engine places for a site. */
export interface AttachPoint {
  readonly vaddr: bigint;
  readonly fileOffset: bigint;
  /**
   * `uprobe`: fires when the instruction is reached. `uretprobe`: fires when the function
   * starting there returns (the kernel replaces its return address with a trampoline's).
   */
  readonly attach: 'uprobe' | 'uretprobe';
  /**
   * What a hit means: the site's own probe (an entry, instruction or USDT probe, or a return
   * through the trampoline); a `return` at one of the function's exits; or the `frame-entry`
   * that opens a call's frame, so that its return can be paired with it (not shown).
   */
  readonly role: 'probe' | 'return' | 'frame-entry';
  /** For a return at an exit: a `ret`, or a `tail-call` (its result is not made yet). */
  readonly exit?: 'ret' | 'tail-call' | undefined;
  /** What the hit fetches: the site's fetches, then the frame's fields when asked for. */
  readonly fetches: readonly FetchArg[];
}

/**
 * The fields a stream fetches at frame entries and returns probed at their exits, to pair
 * them in user space: the stack pointer, and for goroutine frames the goroutine (%r14) and
 * the top of its stack (g.stack.hi, 8 bytes into the g). Named so that no spec can take them.
 */
export const FRAME_FIELDS = {
  sp: '__frame_sp',
  /** The return address's low 32 bits, at an entry timed through the kernel's trampoline. */
  returnAddress: '__frame_ra',
  goroutine: '__frame_g',
  stackTop: '__frame_hi',
} as const;

const NO_SPAN: Span = { start: 0, end: 0 };

function field(name: string, expr: FetchExpr): FetchArg {
  return { name, nameExplicit: true, expr, type: 'x64', span: NO_SPAN };
}

const SP_FIELD = field(FRAME_FIELDS.sp, { kind: 'sp', span: NO_SPAN });
const G_REGISTER: FetchExpr = { kind: 'register', name: 'r14', span: NO_SPAN };
/** The frame fields of each kind, made once: every point shares them (nothing changes them). */
const FRAME: Readonly<Record<'thread' | 'goroutine', readonly FetchArg[]>> = {
  thread: Object.freeze([SP_FIELD]),
  goroutine: Object.freeze([
    SP_FIELD,
    field(FRAME_FIELDS.goroutine, G_REGISTER),
    field(FRAME_FIELDS.stackTop, { kind: 'deref', offset: 8n, inner: G_REGISTER, span: NO_SPAN }),
  ]),
};
const NO_FETCHES: readonly FetchArg[] = Object.freeze([]);

/** The hidden fetches that identify a call's frame at its entry and at its exits. */
/**
 * The stack pointer's low 32 bits, as a frame field (FRAME_FIELDS.sp): enough to order the
 * calls of one thread, whose stack spans far less than 2 GiB (compared by their difference,
 * wrapped), and a number, not a bigint, to read at every call of a recording.
 */
const SP_LOW_FIELD: FetchArg = { ...SP_FIELD, type: 'u32' };

export function stackPointerFetch(): FetchArg {
  return SP_LOW_FIELD;
}

/**
 * The low 32 bits of the return address at a call's entry (`*(u64 *)sp`), as a frame field
 * (FRAME_FIELDS.returnAddress): where the kernel set a return trampoline for a call of the
 * function at this stack pointer, an entry that finds it replaced went back to its entry
 * within that call (see Attachment's #setsTrampoline()).
 */
export function returnAddressFetch(): FetchArg {
  return RA_LOW_FIELD;
}

const RA_LOW_FIELD: FetchArg = {
  ...field(FRAME_FIELDS.returnAddress, {
    kind: 'deref',
    offset: 0n,
    inner: { kind: 'sp', span: NO_SPAN },
    span: NO_SPAN,
  }),
  type: 'u32',
};

export function frameFetches(frames: 'thread' | 'goroutine'): readonly FetchArg[] {
  return FRAME[frames];
}

export interface AttachPointOptions {
  /** Add the frame's fields to frame entries and exits (for pairing in user space). */
  readonly frameFields?: boolean | undefined;
}

/**
 * The uprobes that serve a site: one at the site itself, except for a return probe whose
 * returns are caught at its exits (ReturnPlan `sites`): one at each exit, and one at the
 * call's entry that opens its frame. At an exit, `retval` reads %rax (the kernel's
 * `$retval` exists only for uretprobes), and at a tail call the fetches of results are left
 * out: the function jumped to has not made them yet.
 */
export function attachPoints(site: ProbeSite, options: AttachPointOptions = {}): AttachPoint[] {
  const returns = site.returns;
  if (site.kind !== 'return' || returns === undefined || returns.mode === 'trampoline') {
    return [
      {
        vaddr: site.vaddr,
        fileOffset: site.fileOffset,
        attach: site.kind === 'return' ? 'uretprobe' : 'uprobe',
        role: 'probe',
        fetches: site.fetches,
      },
    ];
  }
  const frame = options.frameFields === true ? frameFetches(returns.frames) : NO_FETCHES;
  const points: AttachPoint[] = returns.sites.map((exit) => ({
    vaddr: exit.vaddr,
    fileOffset: exit.fileOffset,
    attach: 'uprobe',
    role: 'return',
    exit: exit.kind,
    fetches: exitFetches(site, exit.kind, frame),
  }));
  points.push({
    vaddr: returns.entry.vaddr,
    fileOffset: returns.entry.fileOffset,
    attach: 'uprobe',
    role: 'frame-entry',
    fetches: frame,
  });
  return points;
}

/**
 * What a return probe caught at an exit of kind `exit` fetches: the site's fetches (results
 * from %rax; none at a tail call, whose result is not made yet), then `frame`: the frame's
 * fields alone, shared, where the site fetches nothing (a recording).
 */
export function exitFetches(
  site: ProbeSite,
  exit: 'ret' | 'tail-call',
  frame: readonly FetchArg[],
): readonly FetchArg[] {
  if (site.fetches.length === 0) return frame;
  return [
    ...(exit === 'tail-call'
      ? site.fetches.filter((f) => !readsResult(f.expr))
      : site.fetches.map(resultFromRegister)),
    ...frame,
  ];
}

function readsResult(expr: FetchExpr): boolean {
  if (expr.kind === 'deref') return readsResult(expr.inner);
  return expr.kind === 'retval';
}

function resultFromRegister(fetch: FetchArg): FetchArg {
  const expr = withRegister(fetch.expr);
  return expr === fetch.expr ? fetch : { ...fetch, expr };
}

function withRegister(expr: FetchExpr): FetchExpr {
  if (expr.kind === 'deref') {
    const inner = withRegister(expr.inner);
    return inner === expr.inner ? expr : { ...expr, inner };
  }
  if (expr.kind === 'retval') return { kind: 'register', name: 'rax', span: expr.span };
  return expr;
}

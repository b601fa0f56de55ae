/** Every upscope group and instance name starts with this, followed by the owner's pid. */
export const UPSCOPE_PREFIX = 'upscope_';

/**
 * The uprobe event group of the upscope process `ownerPid`: `upscope_<pid>`. Naming the group
 * after its owner lets a later run tell a stale group (owner gone) from a live one.
 */
export function sessionGroupName(ownerPid: number): string {
  return `${UPSCOPE_PREFIX}${ownerPid}`;
}

/**
 * The tracefs instance of the upscope process `ownerPid`: `upscope_<pid>` for its first
 * session, `upscope_<pid>_<n>` (n >= 2) for further sessions open at the same time.
 */
export function sessionInstanceName(ownerPid: number, ordinal = 1): string {
  return ordinal <= 1 ? `${UPSCOPE_PREFIX}${ownerPid}` : `${UPSCOPE_PREFIX}${ownerPid}_${ordinal}`;
}

const GROUP_PATTERN = /^upscope_([1-9][0-9]{0,9})$/;
const INSTANCE_PATTERN = /^upscope_([1-9][0-9]{0,9})(?:_[1-9][0-9]{0,5})?$/;

/**
 * The owner pid of an upscope event group (`upscope_<pid>`), or undefined for any other group,
 * including look-alikes such as `upscope_test_12` or `upscope_12x`.
 */
export function groupOwnerPid(group: string): number | undefined {
  const match = GROUP_PATTERN.exec(group);
  return match === null ? undefined : Number(match[1]);
}

/**
 * The owner pid of an upscope instance (`upscope_<pid>` or `upscope_<pid>_<n>`), or undefined
 * for any other instance name.
 */
export function instanceOwnerPid(instance: string): number | undefined {
  const match = INSTANCE_PATTERN.exec(instance);
  return match === null ? undefined : Number(match[1]);
}

/**
 * Hands out event names unique within one group: the first request for a base name gets it
 * as is, later ones get `_2`, `_3`... Names already in the group (from `taken`) are skipped.
 * The kernel limits event names (MAX_EVENT_NAME_LEN, 64 bytes), so the base is shortened to
 * leave room for the suffix.
 */
export class EventNamer {
  readonly #taken: Set<string>;

  constructor(taken: Iterable<string> = []) {
    this.#taken = new Set(taken);
  }

  take(base: string): string {
    for (let n = 1; ; n++) {
      const suffix = n === 1 ? '' : `_${n}`;
      const name = `${base.slice(0, 63 - suffix.length)}${suffix}`;
      if (!this.#taken.has(name)) {
        this.#taken.add(name);
        return name;
      }
    }
  }

  /** Make a name available again (after its event was removed). */
  release(name: string): void {
    this.#taken.delete(name);
  }
}

/** One event listed in uprobe_events. */
export interface ListedEvent {
  readonly group: string;
  readonly event: string;
  /** The line as the kernel lists it (offsets padded to 16 digits). */
  readonly line: string;
}

/** The events listed in the text of uprobe_events (`p:GROUP/EVENT PATH:0xOFF ARGS`). */
export function parseUprobeEvents(text: string): ListedEvent[] {
  const events: ListedEvent[] = [];
  for (const line of text.split('\n')) {
    const match = /^[pr]:([^/\s]+)\/(\S+)/.exec(line);
    if (match !== null) events.push({ group: match[1]!, event: match[2]!, line });
  }
  return events;
}

import { ProbeError, quote } from '../../errors/index.js';

/** One `field:` line of a tracefs `format` file (or of `events/header_page`). */
export interface EventField {
  readonly name: string;
  /**
   * The C type as the kernel prints it, without the name: `unsigned short`, `s32`,
   * `char[16]`, `__data_loc char[]`.
   */
  readonly type: string;
  /** Byte offset of the field from the start of the record. */
  readonly offset: number;
  readonly sizeBytes: number;
  readonly signed: boolean;
  /** A `common_*` field, shared by every event (type, flags, preempt count, pid). */
  readonly common: boolean;
  /**
   * How the value is stored: in place (`static`), or as a u32 in place whose low 16 bits are
   * the offset of the data in the record and whose high 16 bits its length (`data_loc`), or
   * the same with the offset counted from the end of the u32 (`rel_loc`, kernel 5.19+).
   */
  readonly location: 'static' | 'data_loc' | 'rel_loc';
  /** Element count of a fixed array field (`char comm[16]` -> 16); undefined for scalars. */
  readonly arrayLength: number | undefined;
  /** The element type of an array (`char` for `char[16]` and `__data_loc char[]`). */
  readonly elementType: string;
}

/** An event's `events/GROUP/NAME/format` file. */
export interface EventFormat {
  readonly name: string;
  /** The event's id, as written into each record's `common_type`. */
  readonly id: number;
  /** Every field in file order: the common ones first, then the event's own. */
  readonly fields: readonly EventField[];
}

/** One field of `events/header_page`. */
export interface HeaderPageField {
  readonly offset: number;
  readonly sizeBytes: number;
  readonly signed: boolean;
}

/** The layout of a ring-buffer page header, from `events/header_page`. */
export interface HeaderPage {
  /** u64 time stamp of the page's first event. */
  readonly timestamp: HeaderPageField;
  /** Size of the committed data, with the missed-events flags in its top bits. */
  readonly commit: HeaderPageField;
  /** Listed by the kernel inside `commit`; kept for completeness. */
  readonly overwrite: HeaderPageField;
  /** Where the events start; `sizeBytes` is the data size of a default sub-buffer. */
  readonly data: HeaderPageField;
}

interface RawField {
  readonly declaration: string;
  readonly offset: number;
  readonly sizeBytes: number;
  readonly signed: boolean | undefined;
  readonly line: number;
}

const FIELD_LINE =
  /^\s*field:\s*(.+?);\s*offset:\s*(\d+);\s*size:\s*(\d+);(?:\s*signed:\s*(\d+);)?\s*$/;
const DECLARATION = /^(.*?)\s*([A-Za-z_][A-Za-z0-9_]*)\s*(?:\[\s*([^\]]*?)\s*\])?$/;

/** A limit well above anything the kernel prints, so a garbled number cannot mislead. */
const MAX_OFFSET = 1 << 24;

function formatError(what: string, reason: string, line?: number): ProbeError {
  const where = line === undefined ? '' : ` (line ${line})`;
  return new ProbeError('ERR_TRACEFS_FORMAT', `Cannot parse ${what}${where}: ${reason}`, {
    hints: ['The file is read from tracefs as the kernel wrote it; check it with cat'],
  });
}

function parseFieldLines(text: string, what: string): RawField[] {
  const fields: RawField[] = [];
  const lines = text.split('\n');
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i]!;
    if (!/^\s*field\s*:/.test(line)) continue;
    const m = FIELD_LINE.exec(line);
    if (m === null) {
      throw formatError(
        what,
        `field line ${quote(line.trim())} is not "field:TYPE NAME; offset:N; size:N; signed:N;"`,
        i + 1,
      );
    }
    const offset = Number(m[2]);
    const sizeBytes = Number(m[3]);
    if (offset > MAX_OFFSET || sizeBytes > MAX_OFFSET) {
      throw formatError(
        what,
        `field ${quote(m[1]!)} has offset ${offset} and size ${sizeBytes}, beyond any record`,
        i + 1,
      );
    }
    fields.push({
      declaration: m[1]!.trim(),
      offset,
      sizeBytes,
      signed: m[4] === undefined ? undefined : m[4] !== '0',
      line: i + 1,
    });
  }
  return fields;
}

function toEventField(raw: RawField, what: string): EventField {
  const m = DECLARATION.exec(raw.declaration);
  if (m === null || m[1] === '') {
    throw formatError(what, `declaration ${quote(raw.declaration)} has no type and name`, raw.line);
  }
  let base = m[1]!;
  const name = m[2]!;
  let location: EventField['location'] = 'static';
  if (base.startsWith('__data_loc ')) location = 'data_loc';
  else if (base.startsWith('__rel_loc ')) location = 'rel_loc';
  if (location !== 'static') base = base.replace(/^__(?:data|rel)_loc\s+/, '');
  let elementType = base.replace(/\s*\[\s*\]$/, '');
  let arrayLength: number | undefined;
  if (m[3] !== undefined) {
    // A fixed array: the kernel prints its length as a number (or, rarely, an expression;
    // then it is taken from the size and the element type is unknown).
    arrayLength = /^\d+$/.test(m[3]) ? Number(m[3]) : undefined;
    elementType = base;
    base = `${base}[${m[3]}]`;
  }
  if (location !== 'static' && raw.sizeBytes !== 4) {
    throw formatError(
      what,
      `dynamic field ${quote(name)} has size ${raw.sizeBytes}, not 4`,
      raw.line,
    );
  }
  const type = location === 'static' ? base : `__${location} ${base}`;
  return {
    name,
    type,
    offset: raw.offset,
    sizeBytes: raw.sizeBytes,
    signed: raw.signed ?? false,
    common: name.startsWith('common_'),
    location,
    arrayLength,
    elementType,
  };
}

/**
 * Parse an event's tracefs `format` file (`events/GROUP/NAME/format`): its name, id and
 * fields. Throws ProbeError ERR_TRACEFS_FORMAT when a line is malformed, the name, id or
 * fields are missing, a field name repeats or a dynamic field is not a u32.
 */
export function parseEventFormat(text: string): EventFormat {
  const what = 'event format';
  const name = /^name:\s*(\S+)\s*$/m.exec(text)?.[1];
  if (name === undefined) throw formatError(what, 'no "name:" line');
  const idText = /^ID:\s*(\S+)\s*$/m.exec(text)?.[1];
  if (idText === undefined) throw formatError(`${what} of ${quote(name)}`, 'no "ID:" line');
  if (!/^\d+$/.test(idText) || Number(idText) > 0xffff) {
    throw formatError(
      `${what} of ${quote(name)}`,
      `ID ${quote(idText)} is not a number up to 65535`,
    );
  }
  const context = `${what} of ${quote(name)}`;
  const fields = parseFieldLines(text, context).map((raw) => toEventField(raw, context));
  if (fields.length === 0) throw formatError(context, 'no "field:" lines');
  const seen = new Set<string>();
  for (const field of fields) {
    if (seen.has(field.name))
      throw formatError(context, `field ${quote(field.name)} appears twice`);
    seen.add(field.name);
  }
  return { name, id: Number(idText), fields };
}

/**
 * Parse `events/header_page`: where a ring-buffer page keeps its time stamp, its commit
 * (data size and flags) and its data. Throws ProbeError ERR_TRACEFS_FORMAT when a field is
 * missing, the time stamp is not 8 bytes, the commit not 4 or 8, or the fields overlap.
 */
export function parseHeaderPage(text: string): HeaderPage {
  const what = 'ring-buffer header_page';
  const byName = new Map<string, HeaderPageField>();
  for (const raw of parseFieldLines(text, what)) {
    const name = /([A-Za-z_][A-Za-z0-9_]*)$/.exec(raw.declaration)?.[1];
    if (name === undefined) {
      throw formatError(what, `declaration ${quote(raw.declaration)} has no name`, raw.line);
    }
    byName.set(name, { offset: raw.offset, sizeBytes: raw.sizeBytes, signed: raw.signed ?? false });
  }
  const get = (name: string): HeaderPageField => {
    const field = byName.get(name);
    if (field === undefined) throw formatError(what, `no ${quote(name)} field`);
    return field;
  };
  const timestamp = get('timestamp');
  const commit = get('commit');
  const overwrite = byName.get('overwrite') ?? {
    offset: commit.offset,
    sizeBytes: 1,
    signed: false,
  };
  const data = get('data');
  if (timestamp.sizeBytes !== 8) {
    throw formatError(what, `timestamp is ${timestamp.sizeBytes} bytes, not 8`);
  }
  if (commit.sizeBytes !== 4 && commit.sizeBytes !== 8) {
    throw formatError(what, `commit is ${commit.sizeBytes} bytes, not 4 or 8`);
  }
  const overlaps =
    timestamp.offset < commit.offset + commit.sizeBytes &&
    commit.offset < timestamp.offset + timestamp.sizeBytes;
  if (overlaps || data.offset < Math.max(timestamp.offset + 8, commit.offset + commit.sizeBytes)) {
    throw formatError(
      what,
      `timestamp (offset ${timestamp.offset}), commit (offset ${commit.offset}) and data (offset ${data.offset}) overlap`,
    );
  }
  return { timestamp, commit, overwrite, data };
}

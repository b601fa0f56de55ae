import { DW_FORM } from './constants.js';
import { Cursor } from './cursor.js';

export interface AbbrevAttribute {
  readonly at: number;
  readonly form: number;
  /** The value of a DW_FORM_implicit_const attribute, stored in the abbreviation. */
  readonly implicitConst: bigint | undefined;
}

export interface Abbrev {
  readonly code: number;
  readonly tag: number;
  readonly hasChildren: boolean;
  readonly attributes: readonly AbbrevAttribute[];
}

/**
 * One abbreviation table of .debug_abbrev (the one a unit's header points at): code ->
 * abbreviation. Throws DwarfFormatError on a truncated table or a duplicate code.
 */
export function parseAbbrevTable(bytes: Uint8Array, offset: number): Map<number, Abbrev> {
  const table = new Map<number, Abbrev>();
  const c = new Cursor(bytes, '.debug_abbrev');
  if (offset >= bytes.length)
    c.fail(offset, `abbreviation table offset past the end (${bytes.length})`);
  c.offset = offset;
  for (;;) {
    const at = c.offset;
    const code = c.ulebNumber();
    if (code === 0) return table;
    const tag = c.ulebNumber();
    const children = c.u8();
    if (children > 1) c.fail(at, `abbreviation ${code} has children flag ${children}`);
    const attributes: AbbrevAttribute[] = [];
    for (;;) {
      const name = c.ulebNumber();
      const form = c.ulebNumber();
      if (name === 0 && form === 0) break;
      const implicitConst = form === DW_FORM.implicit_const ? c.sleb() : undefined;
      attributes.push({ at: name, form, implicitConst });
    }
    if (table.has(code)) c.fail(at, `abbreviation code ${code} defined twice`);
    table.set(code, { code, tag, hasChildren: children === 1, attributes });
  }
}

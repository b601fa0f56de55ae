import { basename, isAbsolute } from 'node:path';
import { decodeInstructions } from '../arch/index.js';
import { ProbeError, quote, type Span } from '../errors/index.js';
import { closest, didYouMean } from '../internal/index.js';
import type { FetchArg, FetchExpr, FetchType, ProbeSpec, VariableStep } from '../spec/index.js';
import {
  type AddressExpr,
  cloneName,
  DwarfFormatError,
  type DwarfFunction,
  type DwarfReader,
  type DwarfType,
  type DwarfVariable,
  declaration,
  describeLocation,
  dwarfRegisterName,
  type ElfFile,
  resolvedType,
  type StructMember,
  type SymbolIndex,
  typeName,
  typeSize,
  type VariableLocation,
} from '../symbols/index.js';
import {
  type DebugInfoOptions,
  isDebugInfo,
  lookupDebugInfo,
  missingDebugInfoHints,
} from './debug-info.js';
import type { SiteKind } from './probe-site.js';

/** What lowering a variable needs to know about the file it is in. */
export interface VariableTarget {
  readonly elf: ElfFile;
  readonly displayPath: string;
  /** The file's DWARF reader, created once per file; undefined when it has no .debug_info. */
  dwarf(): DwarfReader | undefined;
  /** When dwarf() is undefined: where debug info was looked for and what would provide it. */
  noDebugInfoHints(): string[];
  /** The file's function symbols, to find a function DWARF names otherwise (`ns::f(int)`). */
  symbols?(): SymbolIndex;
}

/**
 * A DWARF reader for a file (`path` opens it): its own .debug_info, or its separate debug
 * file's (found by build-id or .gnu_debuglink, see lookupDebugInfo); undefined when neither.
 * closeDebugInfo(elf) closes a debug file opened here.
 */
export function openDwarf(
  elf: ElfFile,
  path: string,
  options: DebugInfoOptions = {},
): DwarfReader | undefined {
  const info = lookupDebugInfo(elf, path, options);
  return isDebugInfo(info) ? info.dwarf() : undefined;
}

/** What to tell a user when openDwarf() found nothing for a file. */
export function noDebugInfoHints(
  elf: ElfFile,
  path: string,
  displayPath: string,
  options: DebugInfoOptions = {},
): string[] {
  const info = lookupDebugInfo(elf, path, options);
  if (isDebugInfo(info)) {
    const has = info.lines.present ? 'line tables but no .debug_info' : 'no .debug_info';
    return [`Its debug info (${info.source.path}) has ${has}`, 'Rebuild it with -g'];
  }
  return missingDebugInfoHints(info, displayPath);
}

type VariableExpr = Extract<FetchExpr, { kind: 'variable' }>;

/** Where a (partly accessed) value is: in memory at `base + offset`, or a computed value. */
type Place =
  | { readonly kind: 'memory'; readonly base: FetchExpr; readonly offset: bigint }
  | {
      readonly kind: 'value';
      readonly expr: FetchExpr;
      readonly addend: bigint;
      /** The compiler's constant (DW_AT_const_value, DW_OP_implicit_value, stack_value). */
      readonly constant?: boolean;
    }
  /**
   * A value in pieces (DW_OP_piece): each part's place (or why it cannot be read), from its
   * byte `offset` in the value, `bytes` long. Its members are read from the part holding them.
   */
  | { readonly kind: 'pieces'; readonly parts: readonly PlacePiece[] };

interface PlacePiece {
  readonly place: Exclude<Place, { readonly kind: 'pieces' }> | ProbeError;
  readonly offset: number;
  readonly bytes: number;
}

interface SiteInfo {
  readonly vaddr: bigint;
  readonly kind: SiteKind;
}

/**
 * Lowers every fetch that names a variable (`size`, `req->hdr.len`, `arr[2]`,
 * `req->name:string`) into the register, `ip`-relative and dereference fetches the engines
 * run, typed from DWARF when the user gave no type; other fetches pass through. Throws
 * ProbeError (pointing at the variable in the spec) when a variable cannot be fetched there.
 */
export function lowerVariableFetches(
  spec: ProbeSpec,
  fetches: readonly FetchArg[],
  target: VariableTarget,
  site: SiteInfo,
): FetchArg[] {
  return fetches.map((fetch) => {
    if (!containsVariable(fetch.expr)) return fetch;
    try {
      return lowerFetch(spec, fetch, target, site);
    } catch (err) {
      if (err instanceof DwarfFormatError) {
        throw new ProbeError(
          'ERR_DWARF_INVALID',
          `Cannot read the debug info of ${quote(target.displayPath)}: ${err.message}`,
          {
            source: { text: spec.text, span: fetch.span },
            hints: ['The file may be damaged or written by a tool this reader does not follow'],
            cause: err,
          },
        );
      }
      throw err;
    }
  });
}

function containsVariable(expr: FetchExpr): boolean {
  let e = expr;
  while (e.kind === 'deref') e = e.inner;
  return e.kind === 'variable';
}

function lowerFetch(
  spec: ProbeSpec,
  fetch: FetchArg,
  target: VariableTarget,
  site: SiteInfo,
): FetchArg {
  const offsets: { offset: bigint; span: Span }[] = [];
  let e = fetch.expr;
  while (e.kind === 'deref') {
    offsets.push({ offset: e.offset, span: e.span });
    e = e.inner;
  }
  const variable = e as VariableExpr;
  const text = variableText(variable);
  const fail: Fail = (why, hints = [], code = 'ERR_VARIABLE_UNAVAILABLE') =>
    new ProbeError(code, `Cannot fetch ${quote(text)}: ${why}`, {
      source: { text: spec.text, span: variable.span },
      hints,
    });
  const dwarf = target.dwarf();
  if (dwarf === undefined) {
    throw fail(
      `${quote(target.displayPath)} has no debug info`,
      [
        ...target.noDebugInfoHints(),
        'Or fetch by register or argument, e.g. arg0, +8(arg0):u32, %rdi',
      ],
      'ERR_NO_DEBUG_INFO',
    );
  }
  const hex = `0x${site.vaddr.toString(16)}`;
  const scopes = dwarf.scopesAt(site.vaddr);
  let found: DwarfVariable | undefined;
  // At a function's entry, its own variables: not those of a function inlined at its top.
  const own = site.kind === 'entry' ? scopes[0]?.die : undefined;
  const visible = scopes.length === 0 ? [] : dwarf.variablesAt(site.vaddr, { function: own });
  found = visible.find((v) => v.name === variable.name);
  if (
    found === undefined ||
    (found.global && dwarf.locate(found, site.vaddr).kind === 'unavailable')
  ) {
    found = dwarf.globalNamed(variable.name) ?? found;
  }
  if (found === undefined) {
    const names = visible.map((v) => v.name);
    const hints: string[] = [];
    const suggestion = didYouMean(closest(variable.name, names, 3));
    if (suggestion !== undefined) hints.push(suggestion);
    const split = scopes.length === 0 ? dwarf.unreadSplitAt(site.vaddr) : undefined;
    if (split !== undefined) throw splitDwarfError(split, target.displayPath, hex, fail);
    if (scopes.length === 0) {
      throw fail(
        `no function in the debug info of ${quote(target.displayPath)} covers ${hex}, and no global has that name`,
        hints,
        'ERR_VARIABLE_NOT_FOUND',
      );
    }
    const where =
      (own === undefined ? scopes[scopes.length - 1]?.name : undefined) ?? scopes[0]?.name ?? hex;
    const locals = visible.filter((v) => !v.global).map((v) => v.name);
    if (locals.length > 0) hints.push(`Visible there: ${locals.slice(0, 12).join(', ')}`);
    throw fail(
      `no variable or parameter of that name is visible in ${quote(where)} at ${hex}`,
      hints,
      'ERR_VARIABLE_NOT_FOUND',
    );
  }
  if (site.kind === 'return') {
    throw fail(
      found.global
        ? "a return probe runs in the caller, where the global's address is not known from the probe's own"
        : `${found.parameter ? 'parameters' : 'local variables'} are gone when the function has returned`,
      ['Fetch it in a probe on the function entry, or on an instruction inside the function'],
    );
  }
  const location = dwarf.locate(found, site.vaddr);
  let place = placeOf(location, site, (why) => fail(why));
  let type = dwarf.typeOf(found);
  let path = variable.name;
  for (const step of variable.path) {
    ({ place, type } = applyStep(step, place, type, path, fail));
    path += step.op === '[]' ? `[${step.index}]` : `${step.op}${step.field}`;
  }
  // A C++ reference is read as its object (`const int& n` gives the int), unless its
  // address is asked for (`+off(ref)`): as gdb shows it.
  const referred = resolvedType(type);
  if (offsets.length === 0 && referred.kind === 'pointer' && referred.reference) {
    const { expr: pointer, addend } = pointerValue(place, path, fail);
    place = { kind: 'memory', base: pointer, offset: addend };
    type = referred.target();
  }
  // `+off(var)`: the value is an address; the outer dereferences read memory from it.
  let expr: FetchExpr;
  let fetchType = fetch.type;
  if (offsets.length > 0) {
    expr = valueExpr(place, type, path, fail);
    for (let i = offsets.length - 1; i >= 0; i--) {
      expr = { kind: 'deref', offset: offsets[i]!.offset, inner: expr, span: offsets[i]!.span };
    }
    fetchType ??= 'u64';
  } else if (fetch.type === 'string' || fetch.type === 'ustring') {
    expr = stringExpr(place, type, path, fail);
  } else {
    expr = valueExpr(place, type, path, fail);
    fetchType ??= fetchTypeOf(type, path, fail);
  }
  return {
    ...fetch,
    name: fetch.nameExplicit ? fetch.name : fieldName(text),
    expr,
    type: fetchType,
  };
}

/** The variable with its access path, as written. */
function variableText(variable: VariableExpr): string {
  return (
    variable.name +
    variable.path.map((s) => (s.op === '[]' ? `[${s.index}]` : `${s.op}${s.field}`)).join('')
  );
}

/** A C identifier for a fetched field: `req->hdr.len` -> `req_hdr_len`, `arr[2]` -> `arr_2`. */
export function fieldName(text: string): string {
  const name = text
    .replace(/->|\.|\[|\]/g, '_')
    .replace(/[^A-Za-z0-9_]/g, '_')
    .replace(/_+/g, '_')
    .replace(/_$/, '');
  return /^[0-9]/.test(name) ? `_${name}` : name;
}

type Fail = (
  why: string,
  hints?: string[],
  code?: ConstructorParameters<typeof ProbeError>[0],
) => ProbeError;

function placeOf(
  location: VariableLocation,
  site: SiteInfo,
  unavailable: (why: string) => ProbeError,
): Place {
  switch (location.kind) {
    case 'register':
      return { kind: 'value', expr: registerExpr(location.register, unavailable), addend: 0n };
    case 'memory': {
      const { expr, offset } = addressExpr(location.address, site, unavailable);
      return { kind: 'memory', base: expr, offset };
    }
    case 'value': {
      const { expr, offset } = addressExpr(location.value, site, unavailable);
      return { kind: 'value', expr, addend: offset };
    }
    case 'constant':
      // What the compiler knows it to be there (a parameter every call passes the same,
      // folded by GCC's -fipa-cp): given as that constant, as gdb prints it.
      return {
        kind: 'value',
        expr: { kind: 'constant', value: location.value, span: NOWHERE },
        addend: 0n,
        constant: true,
      };
    case 'pieces': {
      let offset = 0;
      const parts = location.parts.map((part) => {
        let place: PlacePiece['place'];
        try {
          place = placeOf(part.location, site, unavailable) as PlacePiece['place'];
        } catch (err) {
          if (!(err instanceof ProbeError)) throw err;
          place = err;
        }
        const piece = { place, offset, bytes: part.bytes };
        offset += part.bytes;
        return piece;
      });
      return { kind: 'pieces', parts };
    }
    case 'unavailable':
      throw unavailable(`${location.reason} (at 0x${site.vaddr.toString(16)})`);
  }
}

/**
 * The place of the `bytes` bytes at `offset` in a value in pieces: in the part that holds
 * them all, from its start in a register, anywhere in it in memory.
 */
function placeInPieces(
  place: Extract<Place, { readonly kind: 'pieces' }>,
  offset: number,
  bytes: number,
  path: string,
  fail: Fail,
): Place {
  const part = place.parts.find((p) => offset >= p.offset && offset + bytes <= p.offset + p.bytes);
  if (part === undefined) {
    throw fail(`${quote(path)} is split across the pieces its value is kept in at this address`);
  }
  if (part.place instanceof ProbeError) throw part.place;
  const within = BigInt(offset - part.offset);
  if (part.place.kind === 'memory') {
    return { kind: 'memory', base: part.place.base, offset: part.place.offset + within };
  }
  if (within !== 0n) {
    throw fail(`${quote(path)} is in the upper bytes of a register at this address`);
  }
  return part.place;
}

const NOWHERE: Span = { start: 0, end: 0 };

function registerExpr(register: number, unavailable: (why: string) => ProbeError): FetchExpr {
  if (register === 7) return { kind: 'sp', span: NOWHERE };
  if (register >= 0 && register < 16) {
    return { kind: 'register', name: dwarfRegisterName(register), span: NOWHERE };
  }
  throw unavailable(
    `it is in register %${dwarfRegisterName(register)}, which probes cannot fetch (only general-purpose registers)`,
  );
}

/** An address as a fetch expression plus a constant offset. */
function addressExpr(
  address: AddressExpr,
  site: SiteInfo,
  unavailable: (why: string) => ProbeError,
): { expr: FetchExpr; offset: bigint } {
  switch (address.base.kind) {
    case 'register':
      return { expr: registerExpr(address.base.register, unavailable), offset: address.offset };
    case 'absolute':
      // While a uprobe's handler runs the kernel sets ip to the probed address, so a file
      // address is ip + (address - probed address) whatever the load bias.
      return {
        expr: { kind: 'ip', span: NOWHERE },
        offset: BigInt.asIntN(64, address.offset - site.vaddr),
      };
    case 'deref': {
      const inner = addressExpr(address.base.of, site, unavailable);
      return {
        expr: { kind: 'deref', offset: inner.offset, inner: inner.expr, span: NOWHERE },
        offset: address.offset,
      };
    }
  }
}

/**
 * The error for a pointer the compiler replaced by a constant: an address in the file (not
 * where the file is loaded), which a probe neither shows as it is nor reads through.
 */
function constantAddress(place: Place, path: string, fail: Fail): ProbeError {
  const value = place.kind === 'value' && place.expr.kind === 'constant' ? place.expr.value : 0n;
  return fail(
    `the compiler replaced ${quote(path)} by the constant 0x${value.toString(16)}, an address in the file rather than in the process, which probes do not read through`,
  );
}

/** The value a pointer place holds, as an expression plus a constant. */
function pointerValue(place: Place, path: string, fail: Fail): { expr: FetchExpr; addend: bigint } {
  if (place.kind === 'pieces')
    return pointerValue(placeInPieces(place, 0, 8, path, fail), path, fail);
  if (place.kind === 'value' && place.constant === true) throw constantAddress(place, path, fail);
  if (place.kind === 'value') return { expr: place.expr, addend: place.addend };
  return {
    expr: { kind: 'deref', offset: place.offset, inner: place.base, span: NOWHERE },
    addend: 0n,
  };
}

function kindOf(type: DwarfType): string {
  return typeName(type);
}

function applyStep(
  step: VariableStep,
  place: Place,
  type: DwarfType,
  path: string,
  fail: Fail,
): { place: Place; type: DwarfType } {
  const t = resolvedType(type);
  // Its reason, not "? has no members" (a type in a supplementary file not found).
  if (t.kind === 'unknown') throw fail(`the type of ${quote(path)} is not known: ${t.reason}`);
  if (step.op === '[]') {
    if (t.kind === 'array') {
      const [count, ...rest] = t.dims;
      if (count !== undefined && BigInt(step.index) >= count) {
        throw fail(
          `index ${step.index} is out of bounds: ${quote(path)} is ${kindOf(type)} (${count} elements)`,
        );
      }
      const element: DwarfType =
        rest.length === 0 ? t.element : { kind: 'array', element: t.element, dims: rest };
      const size = typeSize(element);
      if (size === undefined) throw fail(`the size of the elements of ${quote(path)} is not known`);
      if (place.kind !== 'memory') {
        throw fail(`${quote(path)} is not in memory at this address, so it cannot be indexed`);
      }
      return {
        place: {
          kind: 'memory',
          base: place.base,
          offset: place.offset + BigInt(step.index * size),
        },
        type: element,
      };
    }
    if (t.kind === 'pointer') {
      const target = t.target();
      const size = typeSize(target);
      if (size === undefined)
        throw fail(`${quote(path)} points at ${kindOf(target)}, whose size is not known`);
      const { expr, addend } = pointerValue(place, path, fail);
      return {
        place: { kind: 'memory', base: expr, offset: addend + BigInt(step.index * size) },
        type: target,
      };
    }
    throw fail(`${quote(path)} is ${kindOf(type)}, not an array or a pointer`);
  }
  const field = step.field;
  if (step.op === '->') {
    if (t.kind !== 'pointer') {
      const hint = isAggregate(t) ? [`Use "." on a struct: ${path}.${field}`] : [];
      throw fail(`${quote(path)} is ${kindOf(type)}, not a pointer, so "->" does not apply`, hint);
    }
    const target = t.target();
    const member = findMember(target, field, path, '->', fail);
    const { expr, addend } = pointerValue(place, path, fail);
    return {
      place: { kind: 'memory', base: expr, offset: addend + member.offset! },
      type: member.type,
    };
  }
  if (t.kind === 'pointer' && t.reference) {
    // A C++ reference is its object: "." reads through it, as in the source.
    return applyStep({ ...step, op: '->' }, place, type, path, fail);
  }
  if (t.kind === 'pointer') {
    throw fail(`${quote(path)} is a pointer (${kindOf(type)}), so "." does not apply`, [
      `Use "->" through a pointer: ${path}->${field}`,
    ]);
  }
  const member = findMember(type, field, path, '.', fail);
  if (place.kind === 'pieces') {
    const size = typeSize(member.type);
    if (size === undefined) throw fail(`the size of ${quote(`${path}.${field}`)} is not known`);
    return {
      place: placeInPieces(place, Number(member.offset!), size, `${path}.${field}`, fail),
      type: member.type,
    };
  }
  if (place.kind !== 'memory') {
    throw fail(
      `${quote(path)} is held in registers at this address, so its members cannot be read`,
    );
  }
  return {
    place: { kind: 'memory', base: place.base, offset: place.offset + member.offset! },
    type: member.type,
  };
}

function isAggregate(t: DwarfType): boolean {
  return t.kind === 'struct' || t.kind === 'union' || t.kind === 'class';
}

function findMember(
  type: DwarfType,
  field: string,
  path: string,
  op: string,
  fail: Fail,
): StructMember {
  const t = resolvedType(type);
  if (t.kind !== 'struct' && t.kind !== 'union' && t.kind !== 'class') {
    throw fail(
      `${quote(path)} ${op === '->' ? 'points at' : 'is'} ${kindOf(type)}, which has no members`,
    );
  }
  // Members of anonymous structs and unions, and of base classes, are reached as if they
  // were the outer one's.
  const search = (members: readonly StructMember[], base: bigint): StructMember | undefined => {
    for (const m of members) {
      if (m.name === field)
        return { ...m, offset: m.offset === undefined ? undefined : m.offset + base };
      const inner = resolvedType(m.type);
      if (
        m.name === undefined &&
        isAggregate(inner) &&
        m.offset !== undefined &&
        'members' in inner
      ) {
        const found = search(inner.members(), base + m.offset);
        if (found !== undefined) return found;
      }
    }
    return undefined;
  };
  const member = search(t.members(), 0n);
  if (member === undefined) {
    const names = t.members().flatMap((m) => (m.name === undefined ? [] : [m.name]));
    const hints: string[] = [];
    const suggestion = didYouMean(closest(field, names, 3));
    if (suggestion !== undefined) hints.push(suggestion);
    if (names.length > 0) hints.push(`Its members: ${names.join(', ')}`);
    throw fail(`${typeName(t)} has no member ${quote(field)}`, hints, 'ERR_VARIABLE_NOT_FOUND');
  }
  if (member.bitSize !== undefined) {
    throw fail(`${quote(`${path}${op}${field}`)} is a bitfield, which upscope does not read`, [
      'Fetch the word that holds it by offset, e.g. +OFF(...):u32, and mask the bits yourself',
    ]);
  }
  if (member.offset === undefined)
    throw fail(`the offset of member ${quote(field)} is not a constant`);
  return member;
}

/** An expression whose value is the place's value (a scalar or pointer). */
function valueExpr(place: Place, type: DwarfType, path: string, fail: Fail): FetchExpr {
  const t = resolvedType(type);
  if (isAggregate(t) && 'members' in t) {
    const names = t.members().flatMap((m) => (m.name === undefined ? [] : [`${path}.${m.name}`]));
    throw fail(`${quote(path)} is ${kindOf(type)}: fetch one of its members`, [
      `Its members: ${names.join(', ')}`,
    ]);
  }
  if (t.kind === 'array') {
    const element = resolvedType(t.element);
    const hints =
      element.kind === 'base' && element.sizeBytes === 1
        ? [`Read it as a string: ${path}:string`]
        : [`Fetch one element, e.g. ${path}[0]`];
    throw fail(`${quote(path)} is an array (${kindOf(type)})`, hints);
  }
  if (place.kind === 'memory') {
    return { kind: 'deref', offset: place.offset, inner: place.base, span: NOWHERE };
  }
  if (place.kind === 'pieces') {
    throw fail(`${quote(path)} is split into pieces at this address (DW_OP_piece)`);
  }
  if (place.constant === true && t.kind === 'pointer') throw constantAddress(place, path, fail);
  if (place.addend !== 0n) {
    throw fail(
      `its value is computed at this address (a register plus ${place.addend}), which probes cannot fetch`,
    );
  }
  return place.expr;
}

/** `:string` on a char pointer (the string it points at) or a char array (the one it holds). */
function stringExpr(place: Place, type: DwarfType, path: string, fail: Fail): FetchExpr {
  const t = resolvedType(type);
  if (t.kind === 'pointer') {
    const { expr, addend } = pointerValue(place, path, fail);
    return { kind: 'deref', offset: addend, inner: expr, span: NOWHERE };
  }
  if (t.kind === 'array') {
    if (place.kind !== 'memory') throw fail(`${quote(path)} is not in memory at this address`);
    return { kind: 'deref', offset: place.offset, inner: place.base, span: NOWHERE };
  }
  throw fail(`${quote(path)} is ${kindOf(type)}, not a char pointer or array, so it has no string`);
}

/** The fetch type that reads a value of a DWARF type as C would show it. */
function fetchTypeOf(type: DwarfType, path: string, fail: Fail): FetchType {
  const t = resolvedType(type);
  const sized = (signed: boolean, size: number): FetchType => {
    if (size !== 1 && size !== 2 && size !== 4 && size !== 8) {
      throw fail(`${quote(path)} is ${kindOf(type)} of ${size} bytes; fetches read 1, 2, 4 or 8`);
    }
    return `${signed ? 's' : 'u'}${size * 8}` as FetchType;
  };
  switch (t.kind) {
    case 'pointer':
      return 'x64';
    case 'enum':
      return sized(t.signed, t.sizeBytes);
    case 'base':
      switch (t.encoding) {
        case 0x02: // boolean
          return t.sizeBytes === 1 ? 'bool' : sized(false, t.sizeBytes);
        case 0x06: // signed_char
        case 0x08: // unsigned_char
          if (t.name === 'char') return 'char';
          return sized(t.encoding === 0x06, t.sizeBytes);
        case 0x05: // signed
          return sized(true, t.sizeBytes);
        case 0x07: // unsigned
        case 0x10: // UTF
          return sized(false, t.sizeBytes);
        case 0x01: // address
          return 'x64';
        default:
          throw fail(
            `${quote(path)} is ${kindOf(type)}, a floating-point or other non-integer type; give a type to read its bits, e.g. ${path}:x${t.sizeBytes * 8}`,
          );
      }
    case 'void':
    case 'function':
    case 'unknown':
      throw fail(
        `the type of ${quote(path)} is ${t.kind === 'unknown' ? `not known: ${t.reason}` : kindOf(type)}; give one, e.g. ${path}:u64`,
      );
    default:
      throw fail(`${quote(path)} is ${kindOf(type)}`);
  }
}

/** Declaration text of a variable, C-like (`struct request *req`). */
export function variableDeclaration(dwarf: DwarfReader, variable: DwarfVariable): string {
  return declaration(dwarf.typeOf(variable), variable.name);
}

/** True when the unit holding `vaddr` was compiled without optimization (no -O, or -O0). */
export function unoptimizedAt(dwarf: DwarfReader, vaddr: bigint): boolean {
  const producer = dwarf.producerAt(vaddr);
  if (producer === undefined) return false;
  const levels = [...producer.matchAll(/(?:^|\s)-O(\S*)/g)].map((m) => m[1]);
  const last = levels[levels.length - 1];
  return last === undefined || last === '0';
}

const PROLOGUE = [
  /^endbr64$/,
  /^push %rbp$/,
  /^mov %rsp,%rbp$/,
  /^push %r(bx|12|13|14|15)$/,
  /^sub \$0x[0-9a-f]+,%rsp$/,
  // An argument register stored to its stack slot.
  /^mov[lqwb]? %(r[a-z0-9]+|e[a-z]+|[a-z]{2}[l]?|r\d+[dwb]?),-?0x[0-9a-f]+\(%rbp\)$/,
  /^(movs[sd]|movq|movd|movaps|movapd|movdqa|movups) %xmm\d+,-?0x[0-9a-f]+\(%rbp\)$/,
  // A narrow argument moved through %eax before its store (bool, char, short).
  /^mov %(edi|esi|edx|ecx|r8d|r9d),%eax$/,
];

/**
 * Where the variables of an unoptimized function become valid: past its prologue (frame
 * setup and the stores of arguments to their stack slots), as gdb and perf place a probe on
 * a function named with variables. Reads `code` from the function's start.
 */
export function afterPrologue(code: Uint8Array, vaddr: bigint): bigint {
  let at = vaddr;
  for (const insn of decodeInstructions(code, vaddr, { maxCount: 32 })) {
    if (insn.invalid || !PROLOGUE.some((p) => p.test(insn.text))) break;
    at = insn.vaddr + BigInt(insn.length);
  }
  return at;
}

/**
 * Where a probe on a function's entry goes when its fetches name variables: past the
 * prologue when the function was compiled without optimization (its variables live in stack
 * slots the prologue fills), else the entry itself.
 */
export function variableProbeAddress(
  fetches: readonly FetchArg[],
  target: VariableTarget,
  entry: bigint,
): bigint {
  if (!fetches.some((f) => containsVariable(f.expr))) return entry;
  return functionProbeAddress(target, entry);
}

/** A function's entry, or past its prologue when it was compiled without optimization. */
export function functionProbeAddress(target: VariableTarget, entry: bigint): bigint {
  const dwarf = target.dwarf();
  try {
    if (dwarf === undefined || !unoptimizedAt(dwarf, entry)) return entry;
  } catch (err) {
    if (err instanceof DwarfFormatError) return entry; // reported when the fetch is lowered
    throw err;
  }
  // Where the compiler says the prologue ends (LLVM's code: rustc's -C opt-level=0 stores its
  // arguments from %rsp, past the instructions GCC's prologues are known by).
  const marked = dwarf.prologueEnd(entry);
  if (marked !== undefined && marked > entry) return marked;
  const segment = target.elf.loadSegmentOf(entry);
  const fileOffset = target.elf.vaddrToFileOffset(entry);
  if (segment === undefined || fileOffset === undefined) return entry;
  const available = segment.vaddr + segment.fileSize - entry;
  const length = Number(available < 128n ? available : 128n);
  return afterPrologue(target.elf.read(fileOffset, length), entry);
}

/**
 * The DWARF functions (out-of-line copies and inlined instances) a name means: DWARF's own
 * name or linkage name (`parse_request`, `_ZN3app5checkEl`), else the name as probes take it
 * (`app::check`, `'app::check(long)'`, a Rust path): the symbols it finds, each the entry of a
 * subprogram, with the inlined instances of the same function. A .cold part is not one.
 */
function functionsOf(dwarf: DwarfReader, target: VariableTarget, name: string): DwarfFunction[] {
  const named = dwarf.functionsNamed(name);
  if (named.length > 0 || target.symbols === undefined) return named;
  const found: DwarfFunction[] = [];
  const seen = new Set<number>();
  for (const fn of target.symbols().functionsCalled(name)) {
    if (cloneName(fn.name)?.cold === true) continue;
    const subprogram = dwarf.scopesAt(fn.vaddr)[0]?.die;
    if (subprogram === undefined || dwarf.info.entryPc(subprogram) !== fn.vaddr) continue;
    const origin = dwarf.info.origin(subprogram).offset;
    if (seen.has(origin)) continue;
    seen.add(origin);
    const dwarfName = dwarf.info.name(subprogram);
    const linkage = dwarf.info.linkageName(subprogram);
    const instances = dwarf
      .functionsNamed(linkage ?? dwarfName ?? fn.name)
      .filter((f) => dwarf.info.origin(f.die).offset === origin);
    found.push(
      ...(instances.some((f) => f.die === subprogram)
        ? instances
        : [
            {
              name: dwarfName ?? fn.name,
              linkageName: linkage,
              inlined: false,
              entryPc: fn.vaddr,
              die: subprogram,
            },
            ...instances,
          ]),
    );
  }
  return found;
}

/** One variable or parameter as `list --vars` shows it. */
export interface ListedVariable {
  readonly name: string;
  readonly kind: 'parameter' | 'local';
  /** The C declaration, e.g. `struct request *req`. */
  readonly declaration: string;
  /** Where the value is (`%rdi`, `-0x14(%rbp)`), undefined when unavailable. */
  readonly location: string | undefined;
  /** Why it cannot be fetched there, when it cannot. */
  readonly unavailable: string | undefined;
}

/** One place a function's code starts: its out-of-line copy, or one inlined instance. */
export interface FunctionVariables {
  readonly name: string;
  readonly inlined: boolean;
  /** Where a probe on it goes (past the prologue of unoptimized code). */
  readonly vaddr: bigint;
  /** For an inlined instance: the function it is inlined into. */
  readonly caller: string | undefined;
  readonly variables: readonly ListedVariable[];
}

/**
 * The parameters and local variables visible where a probe on function `name` goes, with
 * their types and locations, for its out-of-line copy and each inlined instance (as
 * `perf probe -V` lists them). Throws ProbeError without debug info or without the function.
 */
export function functionVariables(target: VariableTarget, name: string): FunctionVariables[] {
  const dwarf = target.dwarf();
  if (dwarf === undefined) {
    throw new ProbeError(
      'ERR_NO_DEBUG_INFO',
      `Cannot list the variables of ${quote(name)}: ${quote(target.displayPath)} has no debug info`,
      { hints: target.noDebugInfoHints() },
    );
  }
  try {
    const found = functionsOf(dwarf, target, name);
    if (found.length === 0) {
      const hints: string[] = [];
      const suggestion = didYouMean(closest(name, dwarf.functionNames(), 3));
      if (suggestion !== undefined) hints.push(suggestion);
      throw new ProbeError(
        'ERR_SYMBOL_NOT_FOUND',
        `Cannot list the variables of ${quote(name)}: the debug info of ${quote(target.displayPath)} has no function of that name with code`,
        { hints },
      );
    }
    return found.map((fn) => {
      const vaddr = fn.inlined ? fn.entryPc : functionProbeAddress(target, fn.entryPc);
      const caller = fn.inlined ? dwarf.inlineContextAt(fn.entryPc) : undefined;
      const variables = dwarf
        .variablesAt(vaddr, { function: fn.die })
        .filter((v) => !v.global)
        .map((v): ListedVariable => {
          const location = dwarf.locate(v, vaddr);
          // A constant is fetched as itself (see placeOf()): its location says it.
          const unavailable = location.kind === 'unavailable' ? location.reason : undefined;
          return {
            name: v.name,
            kind: v.parameter ? 'parameter' : 'local',
            declaration: variableDeclaration(dwarf, v),
            location: unavailable === undefined ? describeLocation(location) : undefined,
            unavailable,
          };
        });
      let callerName: string | undefined;
      for (let c = caller; c !== undefined; c = c.caller) {
        if (c.dieOffset !== fn.die.offset) {
          callerName = c.name;
          break;
        }
      }
      return { name: fn.name, inlined: fn.inlined, vaddr, caller: callerName, variables };
    });
  } catch (err) {
    if (err instanceof DwarfFormatError) {
      throw new ProbeError(
        'ERR_DWARF_INVALID',
        `Cannot read the debug info of ${quote(target.displayPath)}: ${err.message}`,
        { cause: err },
      );
    }
    throw err;
  }
}

/**
 * The error for a fetch where the function's DWARF is in a .dwo file that was not found (see
 * DebugInfo.unreadSplit()), saying where it was looked for.
 */
function splitDwarfError(
  split: { readonly name: string; readonly compDir: string | undefined },
  program: string,
  hex: string,
  fail: Fail,
): ProbeError {
  const place =
    isAbsolute(split.name) || split.compDir === undefined ? 'there' : `in ${quote(split.compDir)}`;
  return fail(
    `the debug info of ${quote(program)} at ${hex} is split into a .dwo file ${quote(split.name)} (-gsplit-dwarf), which is not ${place} nor beside the program (or is of another build)`,
    [`Put ${quote(basename(split.name))} beside ${quote(program)}, or build without -gsplit-dwarf`],
    'ERR_NO_DEBUG_INFO',
  );
}

import { DW_AT, DW_ATE, DW_TAG } from './constants.js';
import type { DebugInfo, Die } from './debug-info.js';

export interface StructMember {
  readonly name: string | undefined;
  /** Byte offset in the enclosing struct or union; undefined when not a constant. */
  readonly offset: bigint | undefined;
  /** Set for a bitfield member. */
  readonly bitSize: bigint | undefined;
  readonly type: DwarfType;
  /**
   * A C++ base class (DW_TAG_inheritance), unnamed: its members are found as the class's own,
   * as an anonymous struct's are.
   */
  readonly base?: boolean;
}

/**
 * A type as DWARF describes it, with qualifiers (const, volatile, restrict, atomic) skipped.
 * Pointer targets and struct members are read when first asked for (types can be recursive).
 */
export type DwarfType =
  | { readonly kind: 'void' }
  | {
      readonly kind: 'base';
      readonly name: string;
      /** DW_ATE_*. */
      readonly encoding: number;
      readonly sizeBytes: number;
    }
  | {
      readonly kind: 'pointer';
      readonly sizeBytes: number;
      /** True for a C++ reference (`&`, `&&`): read as a pointer, written with `&`. */
      readonly reference: boolean;
      target(): DwarfType;
    }
  | {
      readonly kind: 'struct' | 'union' | 'class';
      readonly name: string | undefined;
      readonly sizeBytes: number | undefined;
      members(): readonly StructMember[];
    }
  | {
      readonly kind: 'array';
      readonly element: DwarfType;
      /** Element counts, outermost first; undefined for an unknown bound (`int a[]`). */
      readonly dims: readonly (bigint | undefined)[];
    }
  | {
      readonly kind: 'enum';
      readonly name: string | undefined;
      readonly sizeBytes: number;
      readonly signed: boolean;
      readonly enumerators: readonly { readonly name: string; readonly value: bigint }[];
    }
  | { readonly kind: 'typedef'; readonly name: string; readonly target: DwarfType }
  | { readonly kind: 'function'; readonly returns: DwarfType }
  /** A type this reader cannot follow (a type unit, a dwz file, an unknown tag). */
  | { readonly kind: 'unknown'; readonly reason: string };

const MAX_DEPTH = 64;

/** Reads the types of one DebugInfo, cached by DIE. */
export class TypeReader {
  /** By DIE (a supplementary file's DIEs have offsets of their own). */
  private readonly cache = new Map<Die, DwarfType>();

  constructor(private readonly info: DebugInfo) {}

  /** The type of a variable, member or typedef DIE (DW_AT_type; void when absent). */
  typeOf(die: Die): DwarfType {
    const withType = this.info.inherited(die, (d) => (d.attrs.has(DW_AT.type) ? d : undefined));
    if (withType === undefined) return { kind: 'void' };
    const target = this.info.ref(withType, DW_AT.type);
    if (target === undefined) {
      return {
        kind: 'unknown',
        reason: this.unfollowed(withType) ?? 'its type reference is broken',
      };
    }
    return this.type(target);
  }

  /** Why a DIE's DW_AT_type is not followed, when it is one this reader does not follow. */
  private unfollowed(die: Die): string | undefined {
    switch (this.info.unfollowedRef(die, DW_AT.type)) {
      case 'type unit':
        return 'its type is in a type unit (-fdebug-types-section), which upscope does not read';
      case 'supplementary': {
        const name = this.info.supplementaryName();
        return `its type is in the supplementary debug file dwz moved it to${name === undefined ? '' : ` (${name})`}, which was not found`;
      }
      default:
        return undefined;
    }
  }

  /** The type a type DIE describes. */
  type(die: Die, depth = 0): DwarfType {
    const known = this.cache.get(die);
    if (known !== undefined) return known;
    const type = this.build(die, depth);
    this.cache.set(die, type);
    return type;
  }

  private build(die: Die, depth: number): DwarfType {
    if (depth > MAX_DEPTH) return { kind: 'unknown', reason: 'its type chain is too deep' };
    const info = this.info;
    const next = (): DwarfType => {
      const target = info.ref(die, DW_AT.type);
      if (target === undefined) {
        return die.attrs.has(DW_AT.type)
          ? { kind: 'unknown', reason: this.unfollowed(die) ?? 'its type reference is broken' }
          : { kind: 'void' };
      }
      return this.type(target, depth + 1);
    };
    const size = (): number | undefined => {
      const value = info.constant(die, DW_AT.byte_size);
      return value === undefined ? undefined : Number(value);
    };
    switch (die.tag) {
      case DW_TAG.base_type:
        return {
          kind: 'base',
          name: info.name(die) ?? '?',
          encoding: Number(info.constant(die, DW_AT.encoding) ?? 0n),
          sizeBytes: size() ?? 0,
        };
      case DW_TAG.unspecified_type:
        return { kind: 'void' };
      case DW_TAG.const_type:
      case DW_TAG.volatile_type:
      case DW_TAG.restrict_type:
      case DW_TAG.atomic_type:
        return next();
      case DW_TAG.pointer_type:
      case DW_TAG.reference_type:
      case DW_TAG.rvalue_reference_type: {
        let target: DwarfType | undefined;
        return {
          kind: 'pointer',
          sizeBytes: size() ?? die.unit.addressSize,
          reference: die.tag !== DW_TAG.pointer_type,
          target: () => {
            target ??= next();
            return target;
          },
        };
      }
      case DW_TAG.typedef:
        return { kind: 'typedef', name: info.name(die) ?? '?', target: next() };
      case DW_TAG.structure_type:
      case DW_TAG.union_type:
      case DW_TAG.class_type: {
        let members: StructMember[] | undefined;
        return {
          kind:
            die.tag === DW_TAG.union_type
              ? 'union'
              : die.tag === DW_TAG.class_type
                ? 'class'
                : 'struct',
          name: info.name(die),
          sizeBytes: size(),
          members: () => {
            members ??= this.members(die, depth);
            return members;
          },
        };
      }
      case DW_TAG.array_type: {
        const dims: (bigint | undefined)[] = [];
        for (const child of die.children) {
          if (child.tag !== DW_TAG.subrange_type) continue;
          const count = info.constant(child, DW_AT.count);
          const upper = info.constant(child, DW_AT.upper_bound);
          const lower = info.constant(child, DW_AT.lower_bound) ?? 0n;
          dims.push(count ?? (upper === undefined ? undefined : upper - lower + 1n));
        }
        if (dims.length === 0) dims.push(undefined);
        return { kind: 'array', element: next(), dims };
      }
      case DW_TAG.enumeration_type: {
        const base = next();
        const enumerators = die.children
          .filter((child) => child.tag === DW_TAG.enumerator)
          .map((child) => ({
            name: info.name(child) ?? '?',
            value: info.constant(child, DW_AT.const_value) ?? 0n,
          }));
        const stripped = base.kind === 'typedef' ? base.target : base;
        const signed =
          stripped.kind === 'base'
            ? stripped.encoding === DW_ATE.signed || stripped.encoding === DW_ATE.signed_char
            : enumerators.some((e) => e.value < 0n);
        return {
          kind: 'enum',
          name: info.name(die),
          sizeBytes: size() ?? (stripped.kind === 'base' ? stripped.sizeBytes : 4),
          signed,
          enumerators,
        };
      }
      case DW_TAG.subroutine_type:
        return { kind: 'function', returns: next() };
      default:
        return { kind: 'unknown', reason: `DWARF tag 0x${die.tag.toString(16)} is not a type` };
    }
  }

  private members(die: Die, depth: number): StructMember[] {
    const info = this.info;
    const out: StructMember[] = [];
    for (const child of die.children) {
      if (child.tag !== DW_TAG.member && child.tag !== DW_TAG.inheritance) continue;
      const location = child.attrs.get(DW_AT.data_member_location);
      let offset: bigint | undefined;
      if (location === undefined) {
        const bitOffset = info.constant(child, DW_AT.data_bit_offset);
        offset =
          bitOffset === undefined
            ? die.tag === DW_TAG.union_type
              ? 0n
              : undefined
            : bitOffset / 8n;
      } else if (location.kind === 'constant') offset = location.value;
      else if (location.kind === 'block') offset = memberOffsetExpression(location.bytes);
      const target = info.ref(child, DW_AT.type);
      const base = child.tag === DW_TAG.inheritance;
      out.push({
        name: base ? undefined : info.name(child),
        offset,
        bitSize: info.constant(child, DW_AT.bit_size),
        type: target === undefined ? { kind: 'void' } : this.type(target, depth + 1),
        ...(base ? { base } : {}),
      });
    }
    return out;
  }
}

/** A member location written as an expression: `DW_OP_plus_uconst N` (or `DW_OP_constu N`). */
function memberOffsetExpression(bytes: Uint8Array): bigint | undefined {
  if (bytes.length < 2 || (bytes[0] !== 0x23 && bytes[0] !== 0x10)) return undefined;
  let value = 0n;
  let shift = 0n;
  for (let i = 1; i < bytes.length; i++) {
    const byte = bytes[i]!;
    value |= BigInt(byte & 0x7f) << shift;
    shift += 7n;
    if ((byte & 0x80) === 0) return i === bytes.length - 1 ? value : undefined;
  }
  return undefined;
}

/** Typedefs followed to the type they name. */
export function resolvedType(type: DwarfType): DwarfType {
  let t = type;
  for (let i = 0; t.kind === 'typedef' && i < MAX_DEPTH; i++) t = t.target;
  return t;
}

/** The size in bytes of a value of the type, when known. */
export function typeSize(type: DwarfType): number | undefined {
  const t = resolvedType(type);
  switch (t.kind) {
    case 'base':
    case 'pointer':
    case 'enum':
      return t.sizeBytes;
    case 'struct':
    case 'union':
    case 'class':
      return t.sizeBytes;
    case 'array': {
      const element = typeSize(t.element);
      if (element === undefined) return undefined;
      let n = BigInt(element);
      for (const d of t.dims) {
        if (d === undefined) return undefined;
        n *= d;
      }
      return Number(n);
    }
    default:
      return undefined;
  }
}

/** The type written as C would (`unsigned long`, `struct req *`, `char [16]`). */
export function typeName(type: DwarfType): string {
  return declaration(type, '');
}

/** A C declaration of `name` with the type (`struct req *req`, `int arr[4]`). */
export function declaration(type: DwarfType, name: string): string {
  const join = (base: string, declarator: string) =>
    declarator === '' ? base : `${base} ${declarator}`;
  let declarator = name;
  let t = type;
  for (let i = 0; i < MAX_DEPTH; i++) {
    switch (t.kind) {
      case 'pointer': {
        declarator = `${t.reference ? '&' : '*'}${declarator}`;
        const target = t.target();
        if (target.kind === 'array' || target.kind === 'function') declarator = `(${declarator})`;
        t = target;
        continue;
      }
      case 'array':
        declarator = `${declarator}${t.dims.map((d) => `[${d ?? ''}]`).join('')}`;
        t = t.element;
        continue;
      case 'function':
        declarator = `${declarator}()`;
        t = t.returns;
        continue;
      case 'void':
        return join('void', declarator);
      case 'base':
      case 'typedef':
        return join(t.name, declarator);
      case 'struct':
      case 'union':
      case 'class':
      case 'enum':
        return join(`${t.kind} ${t.name ?? '(anonymous)'}`, declarator);
      case 'unknown':
        return join('?', declarator);
    }
  }
  return join('?', declarator);
}

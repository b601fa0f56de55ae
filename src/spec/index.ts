/**
 * Probe specs: text -> `ProbeSpec` with spans, and back. Pure; no I/O.
 *
 * ```
 * SPEC      [KIND:]TARGET:LOCATION (WS FETCHARG)*       whitespace around and between parts is skipped
 * KIND      p entry or instruction (default) | r return | u USDT
 *           with no kind, a PROVIDER:NAME location makes a USDT probe (kindExplicit false)
 * TARGET    any characters but ":", whitespace and "'"; a target called p, r or u is written ./p
 * LOCATION  symbol                 [A-Za-z_.$][A-Za-z0-9_.$]* with "::" between parts
 *           symbol@VER, symbol@@VER   version [A-Za-z0-9_.]+ (both select the version by name)
 *           symbol+OFF             OFF = DEC | 0xHEX, below 2^32
 *           'any text but quote'   a quoted symbol, optionally followed by @VER and +OFF: a
 *                                  demangled C++ name ('ns::C<int>::~C()', 'operator new(...)')
 *           glob                   symbol characters with * ? [abc] [a-z] [!x]; no version or offset
 *           0xHEX                  virtual address
 *           @0xHEX | @DEC          file offset
 *           FILE:LINE              FILE has a "." and only [A-Za-z0-9_./+-]; LINE >= 1
 *           PROVIDER:NAME          [A-Za-z0-9_] and glob characters on each side
 * FETCHARG  [NAME=]FETCH[:TYPE]    NAME [A-Za-z_][A-Za-z0-9_]*, default arg1, arg2, ... by position
 * FETCH     arg0..arg15 | retval | retval1..retval8 | %REG | ip | sp | comm | [+-]OFF(FETCH) (16 deep at most)
 *           | IDENT ('->' IDENT | '.' IDENT | '[' DEC ']')*     a DWARF variable
 * TYPE      s8..s64 u8..u64 x8..x64 string ustring ptr char bool
 * ```
 */
export { globToRegExp, isGlob } from './glob.js';
export {
  type Comparison,
  type ComparisonOp,
  parseComparisonOrThrow,
  parseFetchOrThrow,
  readsReturnValue,
} from './parse-fetch.js';
export {
  MAX_ARG_INDEX,
  MAX_DEREF_DEPTH,
  MAX_FETCHES,
  MAX_RETVAL_INDEX,
  parseSpec,
  parseSpecOrThrow,
} from './parse-spec.js';
export { printFetchExpr, printSpec, printSymbolName, shellWord } from './print-spec.js';
export {
  ARGUMENT_REGISTERS,
  REGISTER_NAMES,
  type RegisterBase,
  type RegisterInfo,
  registerInfo,
} from './registers.js';
export {
  type Diagnostic,
  type DiagnosticCode,
  FETCH_TYPES,
  type FetchArg,
  type FetchExpr,
  type FetchType,
  fetchTypeBytes,
  type Location,
  type ParseSpecResult,
  type ProbeKind,
  type ProbeSpec,
  type Span,
  type VariableStep,
} from './types.js';

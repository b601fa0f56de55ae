/** Why a DWARF section could not be read: which section, where, and what was wrong. */
export class DwarfFormatError extends Error {
  constructor(
    readonly section: string,
    readonly offset: number,
    readonly detail: string,
  ) {
    super(`${section} at 0x${offset.toString(16)}: ${detail}`);
    this.name = 'DwarfFormatError';
  }
}

/**
 * A little-endian reader over one DWARF section (or a slice of it). Every read is checked
 * against the end: a truncated or lying section throws DwarfFormatError, never reads past it.
 * Offsets are numbers (sections larger than 2^53 bytes do not exist); 8-byte values are
 * bigints except where DWARF uses them as offsets.
 */
export class Cursor {
  private readonly view: DataView;
  /** The next byte to read, relative to the start of `bytes`. */
  offset: number;

  constructor(
    readonly bytes: Uint8Array,
    readonly section: string,
    offset = 0,
    /** Reading stops here (exclusive); defaults to the end of `bytes`. */
    readonly end = bytes.length,
  ) {
    this.view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    this.offset = offset;
    if (end > bytes.length || offset > end) this.fail(offset, `range ends past ${bytes.length}`);
  }

  get atEnd(): boolean {
    return this.offset >= this.end;
  }

  get remaining(): number {
    return this.end - this.offset;
  }

  /** A cursor over the next `length` bytes, which this one skips. */
  sub(length: number): Cursor {
    const start = this.take(length);
    return new Cursor(this.bytes, this.section, start, start + length);
  }

  fail(at: number, detail: string): never {
    throw new DwarfFormatError(this.section, at, detail);
  }

  /** Claims `length` bytes and returns where they start. */
  take(length: number): number {
    const at = this.offset;
    if (length < 0 || at + length > this.end) {
      this.fail(at, `needs ${length} bytes, ${this.end - at} left`);
    }
    this.offset = at + length;
    return at;
  }

  skip(length: number): void {
    this.take(length);
  }

  u8(): number {
    return this.view.getUint8(this.take(1));
  }

  s8(): number {
    return this.view.getInt8(this.take(1));
  }

  u16(): number {
    return this.view.getUint16(this.take(2), true);
  }

  s16(): number {
    return this.view.getInt16(this.take(2), true);
  }

  u24(): number {
    const at = this.take(3);
    return this.view.getUint16(at, true) | (this.view.getUint8(at + 2) << 16);
  }

  u32(): number {
    return this.view.getUint32(this.take(4), true);
  }

  s32(): number {
    return this.view.getInt32(this.take(4), true);
  }

  u64(): bigint {
    return this.view.getBigUint64(this.take(8), true);
  }

  s64(): bigint {
    return this.view.getBigInt64(this.take(8), true);
  }

  /** An unsigned value of `size` bytes (1, 2, 4 or 8), e.g. an address of the CU's size. */
  unsigned(size: number): bigint {
    switch (size) {
      case 1:
        return BigInt(this.u8());
      case 2:
        return BigInt(this.u16());
      case 4:
        return BigInt(this.u32());
      case 8:
        return this.u64();
      default:
        return this.fail(this.offset, `unsupported value size ${size}`);
    }
  }

  /** An 8-byte value used as an offset or length; must fit a JS number. */
  u64Number(): number {
    const at = this.offset;
    const value = this.u64();
    if (value > BigInt(Number.MAX_SAFE_INTEGER)) this.fail(at, `offset 0x${value.toString(16)}`);
    return Number(value);
  }

  /** A section offset of the unit's format: 4 bytes in 32-bit DWARF, 8 in 64-bit. */
  sectionOffset(offsetSize: 4 | 8): number {
    return offsetSize === 4 ? this.u32() : this.u64Number();
  }

  uleb(): bigint {
    let result = 0n;
    let shift = 0n;
    for (;;) {
      const at = this.offset;
      const byte = this.u8();
      if (shift < 64n) result |= BigInt(byte & 0x7f) << shift;
      else if ((byte & 0x7f) !== 0) this.fail(at, 'ULEB128 value wider than 64 bits');
      shift += 7n;
      if ((byte & 0x80) === 0) return BigInt.asUintN(64, result);
    }
  }

  sleb(): bigint {
    let result = 0n;
    let shift = 0n;
    let byte: number;
    do {
      byte = this.u8();
      if (shift < 64n) result |= BigInt(byte & 0x7f) << shift;
      shift += 7n;
    } while ((byte & 0x80) !== 0);
    if (shift < 64n && (byte & 0x40) !== 0) result -= 1n << shift;
    return BigInt.asIntN(64, result);
  }

  /** A ULEB128 that must fit a JS number (counts, codes, indexes, lengths). */
  ulebNumber(): number {
    const at = this.offset;
    const value = this.uleb();
    if (value > BigInt(Number.MAX_SAFE_INTEGER)) this.fail(at, 'ULEB128 value too large');
    return Number(value);
  }

  slebNumber(): number {
    const at = this.offset;
    const value = this.sleb();
    if (value > BigInt(Number.MAX_SAFE_INTEGER) || value < BigInt(Number.MIN_SAFE_INTEGER)) {
      this.fail(at, 'SLEB128 value too large');
    }
    return Number(value);
  }

  /** A NUL-terminated UTF-8 string (the NUL is consumed, not returned). */
  cstring(): string {
    const start = this.offset;
    let end = start;
    while (end < this.end && this.bytes[end] !== 0) end++;
    if (end >= this.end) this.fail(start, 'string runs past the end');
    this.offset = end + 1;
    return Buffer.from(this.bytes.buffer, this.bytes.byteOffset + start, end - start).toString(
      'utf8',
    );
  }

  /**
   * A unit's initial length: 4 bytes, or 0xffffffff then 8 bytes for 64-bit DWARF. Returns the
   * length and the offset size the unit uses.
   */
  initialLength(): { length: number; offsetSize: 4 | 8 } {
    const at = this.offset;
    const first = this.u32();
    if (first === 0xffff_ffff) return { length: this.u64Number(), offsetSize: 8 };
    if (first >= 0xffff_fff0) this.fail(at, `reserved unit length 0x${first.toString(16)}`);
    return { length: first, offsetSize: 4 };
  }
}

/** A NUL-terminated string at `offset` in a string section (.debug_str, .debug_line_str). */
export function stringAt(bytes: Uint8Array, section: string, offset: number): string {
  if (offset < 0 || offset >= bytes.length) {
    throw new DwarfFormatError(section, offset, `string offset past the end (${bytes.length})`);
  }
  return new Cursor(bytes, section, offset).cstring();
}

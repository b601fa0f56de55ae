/**
 * JSON for typed results with bigints and Maps (ProbeEvent, Histogram, ProbeCount), so that
 * recorded results come back as the library gave them: a bigint is written as {"$bigint":
 * "123"}, a Map as {"$map": [[key, value], ...]}.
 */
export function encodeTyped(value: unknown): string {
  return JSON.stringify(
    value,
    function (this: unknown, key: string, v: unknown) {
      const raw = (this as Record<string, unknown>)[key];
      if (typeof raw === 'bigint') return { $bigint: raw.toString() };
      if (raw instanceof Map) return { $map: [...raw] };
      if (raw instanceof Uint8Array) return { $bytes: Buffer.from(raw).toString('hex') };
      return v;
    },
    1,
  );
}

export function decodeTyped<T>(text: string): T {
  return JSON.parse(text, (_key, v) => {
    if (v !== null && typeof v === 'object' && !Array.isArray(v)) {
      if (typeof v.$bigint === 'string') return BigInt(v.$bigint);
      if (Array.isArray(v.$map)) return new Map(v.$map);
      if (typeof v.$bytes === 'string') return new Uint8Array(Buffer.from(v.$bytes, 'hex'));
    }
    return v;
  }) as T;
}

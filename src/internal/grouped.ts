/**
 * An integer with its thousands separated by commas (`48,414`), as toLocaleString('en-US')
 * writes it, without ICU: its first use loads the locale's data (16-50 ms, a part of
 * attaching every function of a large program). Anything but a safe integer is left to it.
 */
export function grouped(n: number): string {
  if (!Number.isSafeInteger(n)) return n.toLocaleString('en-US');
  const digits = String(Math.abs(n));
  let out = digits.slice(0, ((digits.length - 1) % 3) + 1);
  for (let at = out.length; at < digits.length; at += 3) out += `,${digits.slice(at, at + 3)}`;
  return n < 0 ? `-${out}` : out;
}

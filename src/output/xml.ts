/**
 * Text with only the characters XML 1.0 allows: control characters other than tab and line
 * breaks, U+FFFE, U+FFFF and halves of surrogate pairs without their other half become U+FFFD.
 */
export function xmlChars(text: string): string {
  let out = '';
  let from = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    let bad = (c < 0x20 && c !== 0x09 && c !== 0x0a && c !== 0x0d) || c === 0xfffe || c === 0xffff;
    if (c >= 0xd800 && c <= 0xdbff) {
      const next = text.charCodeAt(i + 1);
      if (next >= 0xdc00 && next <= 0xdfff) {
        i++;
        continue;
      }
      bad = true;
    } else if (c >= 0xdc00 && c <= 0xdfff) {
      bad = true;
    }
    if (bad) {
      out += `${text.slice(from, i)}\ufffd`;
      from = i + 1;
    }
  }
  return from === 0 ? text : out + text.slice(from);
}

/** Text as XML character data or an attribute value: escaped, and every character legal. */
export function escapeXml(text: string): string {
  return xmlChars(text)
    .replace(/&/g, '&amp;')
    .replace(/</g, '&lt;')
    .replace(/>/g, '&gt;')
    .replace(/"/g, '&quot;')
    .replace(/'/g, '&apos;');
}

/** True when `text` has a glob metacharacter: `*`, `?` or `[`. */
export function isGlob(text: string): boolean {
  return /[*?[]/.test(text);
}

/** One `[...]` class of a glob: the characters or ranges it lists, and where it ends. */
export interface GlobClass {
  readonly negate: boolean;
  /** Inclusive ranges of UTF-16 code units; a single character is a range of one. */
  readonly ranges: readonly (readonly [string, string])[];
  /** Index just past the closing `]`. */
  readonly end: number;
}

/**
 * Read the class that starts with the `[` at `start`. `!` or `^` first negates it; a `]` right
 * after the opening (or after the negation) is a member, as in fnmatch(3); `a-z` is a range and
 * a `-` first or last is a member. Returns undefined when there is no closing `]`.
 */
export function readGlobClass(pattern: string, start: number): GlobClass | undefined {
  let i = start + 1;
  let negate = false;
  if (pattern[i] === '!' || pattern[i] === '^') {
    negate = true;
    i++;
  }
  const first = i;
  const ranges: [string, string][] = [];
  while (i < pattern.length) {
    const c = pattern[i]!;
    if (c === ']' && i > first) return { negate, ranges, end: i + 1 };
    const last = pattern[i + 2];
    if (pattern[i + 1] === '-' && last !== undefined && last !== ']') {
      ranges.push([c, last]);
      i += 3;
    } else {
      ranges.push([c, c]);
      i++;
    }
  }
  return undefined;
}

function escapeInClass(c: string): string {
  return `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`;
}

/**
 * An anchored regular expression for a glob: `*` any run of characters, `?` one character,
 * `[abc]`, `[a-z]`, `[!x]` classes; every other character matches itself. A `[` with no
 * closing `]` matches itself, and a reversed range (`[z-a]`) matches nothing.
 */
export function globToRegExp(pattern: string): RegExp {
  let source = '^';
  let i = 0;
  while (i < pattern.length) {
    const c = pattern[i]!;
    if (c === '*') {
      source += '.*';
      while (pattern[i] === '*') i++;
      continue;
    }
    if (c === '?') {
      source += '.';
    } else if (c === '[') {
      const cls = readGlobClass(pattern, i);
      if (cls !== undefined) {
        const members = cls.ranges
          .filter(([from, to]) => from <= to)
          .map(([from, to]) =>
            from === to ? escapeInClass(from) : `${escapeInClass(from)}-${escapeInClass(to)}`,
          )
          .join('');
        if (members === '') source += cls.negate ? '[\\s\\S]' : '[^\\s\\S]';
        else source += `[${cls.negate ? '^' : ''}${members}]`;
        i = cls.end;
        continue;
      }
      source += '\\[';
    } else {
      source += c.replace(/[.*+?^${}()|[\]\\/-]/g, '\\$&');
    }
    i++;
  }
  return new RegExp(`${source}$`, 's');
}

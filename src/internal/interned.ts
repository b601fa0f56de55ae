/**
 * Each distinct value once (`values`, in the order first seen), by what `key` makes of it;
 * id() gives a value's index there, adding it the first time.
 */
export function interned<T>(key: (value: T) => string): { values: T[]; id(value: T): number } {
  const values: T[] = [];
  const ids = new Map<string, number>();
  return {
    values,
    id(value) {
      const k = key(value);
      let id = ids.get(k);
      if (id === undefined) {
        id = values.length;
        values.push(value);
        ids.set(k, id);
      }
      return id;
    },
  };
}

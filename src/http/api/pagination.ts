/** The list endpoint's query (D15), read the same by its route and by the fast lane. */
import { invalidRequest } from '../../errors.js';

/**
 * D15: page from 1 (default 1; up to Number.MAX_SAFE_INTEGER, the largest a JSON number echoes
 * exactly), limit 1 to 100 (default 20), whole numbers only.
 */
export function readPagination(query: Record<string, unknown>): { page: number; limit: number } {
  const problems = [];
  for (const name of Object.keys(query)) {
    if (name !== 'page' && name !== 'limit') problems.push({ field: name, message: 'is not a known parameter' });
  }
  const read = (name: string, fallback: number, max: number): number => {
    const raw = query[name];
    if (raw === undefined) return fallback;
    if (typeof raw !== 'string' || !/^\d{1,16}$/.test(raw) || Number(raw) < 1 || Number(raw) > max) {
      problems.push({
        field: name,
        message: `must be a whole number from 1${max < Number.MAX_SAFE_INTEGER ? ` to ${max}` : ''}`,
      });
      return fallback;
    }
    return Number(raw);
  };
  // Any page a JSON number holds exactly: one past the end is an empty page (D15).
  const page = read('page', 1, Number.MAX_SAFE_INTEGER);
  const limit = read('limit', 20, 100);
  if (problems.length > 0) throw invalidRequest(problems);
  return { page, limit };
}

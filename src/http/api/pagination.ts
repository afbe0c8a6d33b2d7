/** The list endpoint's query (D15), read the same by its route and by the fast lane. */
import { invalidRequest } from '../../errors.js';

/** D15: page from 1 (default 1), limit 1 to 100 (default 20), whole numbers only. */
export function readPagination(query: Record<string, unknown>): { page: number; limit: number } {
  const problems = [];
  for (const name of Object.keys(query)) {
    if (name !== 'page' && name !== 'limit') problems.push({ field: name, message: 'is not a known parameter' });
  }
  const read = (name: string, fallback: number, max: number): number => {
    const raw = query[name];
    if (raw === undefined) return fallback;
    if (typeof raw !== 'string' || !/^\d{1,9}$/.test(raw) || Number(raw) < 1 || Number(raw) > max) {
      problems.push({ field: name, message: `must be a whole number from 1${max < 1e9 ? ` to ${max}` : ''}` });
      return fallback;
    }
    return Number(raw);
  };
  const page = read('page', 1, 999_999_999);
  const limit = read('limit', 20, 100);
  if (problems.length > 0) throw invalidRequest(problems);
  return { page, limit };
}

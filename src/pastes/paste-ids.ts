/** Paste identifiers (D9): generated ids, custom slugs and the suffix given to a taken slug. */
import { randomInt } from 'node:crypto';

const BASE62 = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz';

/** `length` characters of base62 drawn from the CSPRNG, each uniformly. */
export function randomBase62(length: number): string {
  let out = '';
  for (let i = 0; i < length; i++) out += BASE62[randomInt(62)];
  return out;
}

export function generatePasteId(): string {
  return randomBase62(10);
}

/** Words that name the service's own addresses and so can never be a slug. */
export const RESERVED_SLUGS = new Set([
  'api',
  'view',
  'raw',
  'download',
  'archive',
  'sitemap',
  'sitemap.xml',
  'static',
  'assets',
  'admin',
  'healthz',
  'readyz',
  'docs',
  'about',
  'new',
  'cli',
  'robots.txt',
  'favicon.ico',
]);

const SLUG_PATTERN = /^[A-Za-z0-9_-]{3,64}$/;

/** Why a slug is refused, or null when it may be used. */
export function slugProblem(slug: string): string | null {
  if (!SLUG_PATTERN.test(slug)) return 'must be 3 to 64 characters of A-Z, a-z, 0-9, _ and -';
  if (RESERVED_SLUGS.has(slug.toLowerCase())) return `"${slug}" is reserved`;
  return null;
}

/** The address given instead when a slug is taken: `<slug>-<4 base62 characters>`. */
export function suffixedSlug(slug: string): string {
  return `${slug}-${randomBase62(4)}`;
}

/** A paste id in a URL is checked before any look-up, so junk never reaches the database. */
export function isPlausiblePasteId(id: string): boolean {
  return /^[A-Za-z0-9_-]{3,69}$/.test(id);
}

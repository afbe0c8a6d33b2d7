/**
 * Server-side syntax highlighting for the view page, bounded in size so it stays fast, with the
 * result kept for pastes read again (keyed by content digest and language, so an edited paste is
 * highlighted anew). Highlighting 10 KB costs milliseconds; a cached page costs nothing.
 */
import hljs from 'highlight.js';

/** Larger pastes are shown escaped but not highlighted. */
// 128 KiB takes about 0.3 s to highlight the first time (the event loop waits meanwhile).
export const MAX_HIGHLIGHT_BYTES = 128 * 1024;
const CACHE_BYTES = 32 * 1024 * 1024;

const cache = new Map<string, Buffer>();
let cachedBytes = 0;

/**
 * Highlighted HTML (escaped by highlight.js) as UTF-8 bytes, or null when the language or size
 * does not allow.
 */
export function highlight(content: string, language: string | null, sha256: string): Buffer | null {
  if (!language || content.length > MAX_HIGHLIGHT_BYTES || !hljs.getLanguage(language)) return null;
  const key = `${language}:${sha256}`;
  const hit = cache.get(key);
  if (hit !== undefined) {
    // Most recently used last, so the oldest is evicted first.
    cache.delete(key);
    cache.set(key, hit);
    return hit;
  }
  const html = Buffer.from(hljs.highlight(content, { language, ignoreIllegals: true }).value);
  cache.set(key, html);
  cachedBytes += html.length;
  for (const [oldKey, oldHtml] of cache) {
    if (cachedBytes <= CACHE_BYTES) break;
    cache.delete(oldKey);
    cachedBytes -= oldHtml.length;
  }
  return html;
}

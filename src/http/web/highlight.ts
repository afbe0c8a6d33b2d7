/** Server-side syntax highlighting for the view page, bounded in size so it stays fast. */
import hljs from 'highlight.js';

/** Larger pastes are shown escaped but not highlighted. */
export const MAX_HIGHLIGHT_BYTES = 512 * 1024;

/** Highlighted HTML (escaped by highlight.js), or null when the language or size does not allow. */
export function highlight(content: string, language: string | null): string | null {
  if (!language || content.length > MAX_HIGHLIGHT_BYTES || !hljs.getLanguage(language)) return null;
  return hljs.highlight(content, { language, ignoreIllegals: true }).value;
}

/**
 * The content check of anonymous quick-create (api-v1.md, Authentication 5) and of the home page's
 * form: refuses binary data, content matching the administrator's patterns, and link spam, with
 * 400 `content_rejected`; an anonymous paste's title is held to the same rules.
 * Keyed requests are trusted and never checked.
 */
import { readFileSync } from 'node:fs';
import { AppError } from '../errors.js';

const URL_PATTERN = /\bhttps?:\/\/[^\s<>"']+|\bwww\.[^\s<>"']+/gi;
/** Link spam: at least this many links... */
const SPAM_MIN_LINKS = 3;
/** ...making up more than this share of the non-blank characters. */
const SPAM_LINK_SHARE = 0.5;
/** Binary: more than this share of control characters other than tab, newline, carriage return. */
const BINARY_CONTROL_SHARE = 0.05;

export class ContentChecker {
  constructor(private readonly patterns: RegExp[] = []) {}

  /**
   * Loads one regular expression per line (blank lines and lines starting with # skipped),
   * matched case-insensitively, with ^ and $ at line boundaries.
   */
  static fromFile(path: string | null): ContentChecker {
    if (!path) return new ContentChecker();
    const lines = readFileSync(path, 'utf8').split(/\r?\n/);
    const patterns: RegExp[] = [];
    for (const [index, line] of lines.entries()) {
      const text = line.trim();
      if (text === '' || text.startsWith('#')) continue;
      try {
        patterns.push(new RegExp(text, 'imu'));
      } catch {
        throw new Error(`${path}:${index + 1}: not a valid regular expression`);
      }
    }
    return new ContentChecker(patterns);
  }

  /** Throws 400 content_rejected when anonymous content is refused. */
  check(content: string): void {
    const reason = this.problem(content);
    if (reason) throw new AppError('content_rejected', `The content was refused: ${reason}.`);
  }

  /**
   * Throws 400 content_rejected when an anonymous paste's title is refused: the same rules as
   * its content, since a title is shown on the paste's page and, for a public paste, in the
   * archive, and an E2E paste's title is the only text of it the server can read.
   */
  checkTitle(title: string | null | undefined): void {
    if (!title) return;
    const reason = this.problem(title);
    if (reason) throw new AppError('content_rejected', `The title was refused: ${reason}.`);
  }

  private problem(content: string): string | null {
    if (looksBinary(content)) return 'it looks like binary data, not text';
    if (this.patterns.some((pattern) => pattern.test(content))) return 'it matches a blocked pattern';
    if (isLinkSpam(content)) return 'it is mostly links';
    return null;
  }
}

/**
 * A NUL, or too large a share of control characters and U+FFFD (what a decoder leaves of bytes
 * that are not UTF-8: the body's bytes were strictly UTF-8, so these were sent as such). Not ESC,
 * which colours a terminal's output (`ls --color | curl`), nor tab, LF and CR.
 */
function looksBinary(content: string): boolean {
  let controls = 0;
  for (let i = 0; i < content.length; i++) {
    const c = content.charCodeAt(i);
    if (c === 0) return true;
    if ((c < 32 && c !== 9 && c !== 10 && c !== 13 && c !== 27) || c === 127 || c === 0xfffd) controls++;
  }
  return controls > content.length * BINARY_CONTROL_SHARE;
}

function isLinkSpam(content: string): boolean {
  const links = content.match(URL_PATTERN) ?? [];
  if (links.length < SPAM_MIN_LINKS) return false;
  const linkChars = links.reduce((sum, link) => sum + link.length, 0);
  const nonBlank = content.replace(/\s+/g, '').length;
  return linkChars > nonBlank * SPAM_LINK_SHARE;
}

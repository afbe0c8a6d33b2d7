/**
 * The one validator of what a client sends to create or change a paste, whatever the encoding
 * (JSON, urlencoded form, multipart, query string): the types (D8), the limits of api-v1.md and
 * D6, the `fpe1:` format, slugs (D9) and expiry values (D5). Form values are strings, so booleans
 * there accept true/false/1/0/yes/no/on/off; JSON values must have their real type.
 */
import { AppError, type FieldProblem, invalidRequest } from '../errors.js';
import { ciphertextProblem } from './ciphertext.js';
import { DEFAULT_EXPIRY, EXPIRY_VALUES, type Expiry, isExpiry } from './expiry.js';
import { normalizeLanguage } from './language.js';
import { slugProblem } from './paste-ids.js';

export const MB = 1_048_576;
export const MAX_TEXT_BYTES = 4 * MB;
export const MAX_UPLOAD_BYTES = 10 * MB;
export const MIN_CONTENT_CHARS = 3;
export const MAX_DESCRIPTION_CHARS = 500;
export const MAX_TITLE_CHARS = 200;
export const MAX_PASSWORD_CHARS = 1024;

type FieldKind = 'string' | 'boolean';

/** The fields each kind of request may carry, and their kinds. */
const CREATE_FIELDS = {
  content: 'string',
  title: 'string',
  description: 'string',
  expiry: 'string',
  password: 'string',
  burn: 'boolean',
  encrypt: 'boolean',
  key: 'string',
  downloadable: 'boolean',
  language: 'string',
  public: 'boolean',
  slug: 'string',
} as const satisfies Record<string, FieldKind>;

const UPDATE_FIELDS = {
  content: 'string',
  title: 'string',
  description: 'string',
  expiry: 'string',
  burn: 'boolean',
  password: 'string',
  language: 'string',
  downloadable: 'boolean',
  encrypt: 'boolean',
  key: 'string',
} as const satisfies Record<string, FieldKind>;

type Values<F extends Record<string, FieldKind>> = {
  [K in keyof F]?: F[K] extends 'boolean' ? boolean : string | null;
};

const FORM_BOOLEANS: Record<string, boolean> = {
  true: true,
  false: false,
  '1': true,
  '0': false,
  yes: true,
  no: false,
  on: true,
  off: false,
};

/** Parses a form or query boolean (D8); undefined when it is not one. */
export function parseFormBoolean(value: string): boolean | undefined {
  const key = value.trim().toLowerCase();
  // Its own keys only: `constructor` or `__proto__` are no booleans.
  return Object.hasOwn(FORM_BOOLEANS, key) ? FORM_BOOLEANS[key] : undefined;
}

/**
 * False when the string holds half of a surrogate pair. String.prototype.isWellFormed is ES2024
 * (in Node 20, not in this project's TypeScript lib); a /\p{Cs}/u test costs 30 times as much.
 */
const isWellFormed = (value: string): boolean => (value as string & { isWellFormed(): boolean }).isWellFormed();

/**
 * Why a string cannot be stored as text, or null. NUL: PostgreSQL refuses it (a 500 there, stored
 * as sent on SQLite). A lone surrogate (a JSON `\ud800` escape) has no UTF-8 form: SQLite would
 * store bytes that are not UTF-8, PostgreSQL U+FFFD. Both are refused everywhere, on both, as D17
 * refuses such bytes in an upload.
 */
function textProblem(value: string): string | null {
  if (value.includes('\u0000')) return 'must not contain NUL characters';
  if (!isWellFormed(value)) return 'must be Unicode text (it holds half of a surrogate pair)';
  return null;
}

/** Fields whose blank value in a form means not given (readFields). */
const BLANK_IS_ABSENT_IN_FORMS = new Set(['title', 'description', 'language', 'password']);

/** Checks names and kinds; unknown fields and wrong types are problems, never ignored (D8). */
function readFields<F extends Record<string, FieldKind>>(
  raw: Record<string, unknown>,
  fields: F,
  encoding: 'json' | 'form',
  problems: FieldProblem[],
): Values<F> {
  const values: Record<string, unknown> = {};
  for (const [name, value] of Object.entries(raw)) {
    if (!Object.hasOwn(fields, name)) {
      problems.push({ field: name, message: 'is not a known field' });
      continue;
    }
    const kind = fields[name];
    if (value === undefined) continue;
    // A form sends a text box left blank (or a script's empty variable) as an empty value: not
    // given, so an upload's title and language default to its file's (D17), a language is
    // detected, and no empty title or description is stored.
    if (encoding === 'form' && value === '' && BLANK_IS_ABSENT_IN_FORMS.has(name)) continue;
    if (kind === 'boolean') {
      if (encoding === 'json' && typeof value === 'boolean') values[name] = value;
      else if (encoding === 'form' && typeof value === 'string' && parseFormBoolean(value) !== undefined) {
        values[name] = parseFormBoolean(value);
      } else {
        problems.push({
          field: name,
          message: encoding === 'json' ? 'must be true or false' : 'must be true or false (or 1/0, yes/no, on/off)',
        });
      }
    } else if (typeof value === 'string') {
      const problem = textProblem(value);
      if (problem) problems.push({ field: name, message: problem });
      values[name] = value;
    } else if (value === null && encoding === 'json' && name !== 'content') {
      values[name] = null;
    } else {
      problems.push({ field: name, message: 'must be a string' });
    }
  }
  return values as Values<F>;
}

function codePoints(text: string, atLeast: number): number {
  let count = 0;
  for (const _ of text) {
    count++;
    if (count >= atLeast) break;
  }
  return count;
}

/**
 * Only white space: Unicode's (NEL, U+0085, among it, which JavaScript's trim() keeps) and
 * JavaScript's (the BOM, U+FEFF, which Unicode counts as a format character): either way nothing
 * a reader would see.
 */
const BLANK = /^[\s\p{White_Space}]*$/u;

/**
 * D6: at least 3 characters and not only white space, at most 4 MB of UTF-8. Throws the codes
 * of D7. `maxBytes` is larger for uploads.
 */
export function checkContent(content: string, maxBytes = MAX_TEXT_BYTES): void {
  if (codePoints(content, MIN_CONTENT_CHARS) < MIN_CONTENT_CHARS || BLANK.test(content)) {
    throw new AppError('content_too_short', 'The content must be at least 3 characters and not only white space.', {
      details: [{ field: 'content', message: 'must be at least 3 characters and not only white space' }],
    });
  }
  // A string of n UTF-16 units is at most 3n bytes; measure only when it could be too large.
  if (content.length * 3 > maxBytes && Buffer.byteLength(content, 'utf8') > maxBytes) {
    throw tooLarge(maxBytes);
  }
}

export function tooLarge(maxBytes: number): AppError {
  return maxBytes > MAX_TEXT_BYTES
    ? new AppError('file_too_large', `The file is larger than ${maxBytes / MB} MB.`)
    : new AppError('content_too_large', `The content is larger than ${maxBytes / MB} MB.`);
}

function checkEncryptedContent(content: string): void {
  const problem = ciphertextProblem(content);
  if (problem) {
    throw new AppError('invalid_ciphertext', `The content is not a valid encrypted paste: ${problem}.`, {
      details: [{ field: 'content', message: problem }],
    });
  }
}

/**
 * A PUT's new content without `encrypt`, for a paste that is end to end encrypted: it stays so
 * (a PUT changes only the fields sent), so the content must be ciphertext too. Before, the paste
 * became plain, and a client that sent new ciphertext alone got its `fpe1:` string shown as text.
 */
export function checkContentKeepsEncryption(content: string): void {
  const problem = ciphertextProblem(content);
  if (problem) {
    throw new AppError(
      'invalid_ciphertext',
      `The paste is end-to-end encrypted, and stays so unless encrypt is false: its new content must be an fpe1: string (${problem}).`,
      { details: [{ field: 'content', message: problem }] },
    );
  }
}

function checkOptionalText(
  problems: FieldProblem[],
  field: string,
  value: string | null | undefined,
  max: number,
): string | null | undefined {
  if (value === undefined || value === null) return value;
  if ([...value].length > max) problems.push({ field, message: `must be at most ${max} characters` });
  return value;
}

function readExpiry(problems: FieldProblem[], value: string | null | undefined): Expiry | undefined {
  if (value === undefined || value === null) return undefined;
  if (isExpiry(value)) return value;
  problems.push({ field: 'expiry', message: `must be one of ${EXPIRY_VALUES.join(', ')}` });
  return undefined;
}

function readLanguage(problems: FieldProblem[], value: string | null | undefined): string | null | undefined {
  if (value === undefined || value === null || value === '') return value === '' ? null : value;
  const language = normalizeLanguage(value);
  if (language === null) {
    problems.push({ field: 'language', message: 'must be a language name such as python or javascript' });
  }
  return language;
}

/** A 32-byte key in base64url, padded or not. */
const E2E_KEY = /^[A-Za-z0-9_-]{43}=?$/;

function readKey(problems: FieldProblem[], value: string | null | undefined): string | undefined {
  if (value === undefined || value === null || value === '') return undefined;
  // AES-GCM's 256-bit key (api-v1.md), in base64url (RFC 4648 §5): 43 characters, and the one =
  // of its padding allowed, as Python's urlsafe_b64encode writes a 32-byte key. A key of another
  // length would make a link the web view cannot open (view.js takes 256-bit keys alone).
  if (!E2E_KEY.test(value)) {
    problems.push({
      field: 'key',
      message:
        'must be a 256-bit key in base64url: 43 characters (A-Z, a-z, 0-9, - and _), and at most one = at its end',
    });
  }
  return value;
}

function readPassword(problems: FieldProblem[], value: string | null | undefined): string | null | undefined {
  if (value === undefined) return undefined;
  if (value === null || value === '') return null;
  if (value.length > MAX_PASSWORD_CHARS) {
    problems.push({ field: 'password', message: `must be at most ${MAX_PASSWORD_CHARS} characters` });
  }
  return value;
}

/** A checked request to create a paste. */
export interface CreateInput {
  content: string;
  title: string | null;
  description: string | null;
  expiry: Expiry;
  password: string | null;
  burn: boolean;
  encrypt: boolean;
  key: string | undefined;
  downloadable: boolean;
  /** Undefined: detect it. */
  language: string | null | undefined;
  public: boolean;
  slug: string | undefined;
}

/** Where the content came from, for the size limit and the error codes. */
export interface ContentOrigin {
  /** The upload's file name; absent for text. */
  filename?: string;
}

/** Validates the fields of a create request; `raw.content` is the text or the decoded file. */
export function parseCreateInput(
  raw: Record<string, unknown>,
  encoding: 'json' | 'form',
  origin: ContentOrigin = {},
): CreateInput {
  const problems: FieldProblem[] = [];
  const v = readFields(raw, CREATE_FIELDS, encoding, problems);
  if (v.content === undefined || v.content === null) {
    problems.push({ field: origin.filename === undefined ? 'content' : 'file', message: 'is required' });
  }
  const title = checkOptionalText(problems, 'title', v.title, MAX_TITLE_CHARS);
  const description = checkOptionalText(problems, 'description', v.description, MAX_DESCRIPTION_CHARS);
  const expiry = readExpiry(problems, v.expiry) ?? DEFAULT_EXPIRY;
  const language = readLanguage(problems, v.language);
  const key = readKey(problems, v.key);
  const password = readPassword(problems, v.password);
  let slug: string | undefined;
  if (v.slug !== undefined && v.slug !== null && v.slug !== '') {
    const problem = slugProblem(v.slug);
    if (problem) problems.push({ field: 'slug', message: problem });
    slug = v.slug;
  }
  if (problems.length > 0) throw invalidRequest(problems);

  const content = v.content as string;
  const encrypt = v.encrypt ?? false;
  checkContent(content, origin.filename === undefined ? MAX_TEXT_BYTES : MAX_UPLOAD_BYTES);
  if (encrypt) checkEncryptedContent(content);
  return {
    content,
    title: title ?? null,
    description: description ?? null,
    expiry,
    password: password ?? null,
    burn: v.burn ?? false,
    encrypt,
    key,
    downloadable: v.downloadable ?? false,
    language,
    public: v.public ?? false,
    slug,
  };
}

/** A checked PUT: only the fields sent (undefined = unchanged; null = cleared). */
export interface UpdateInput {
  content?: string;
  title?: string | null;
  description?: string | null;
  expiry?: Expiry;
  burn?: boolean;
  password?: string | null;
  language?: string | null;
  downloadable?: boolean;
  encrypt?: boolean;
  key?: string;
}

export function parseUpdateInput(raw: Record<string, unknown>): UpdateInput {
  const problems: FieldProblem[] = [];
  const v = readFields(raw, UPDATE_FIELDS, 'json', problems);
  const input: UpdateInput = {};
  if (v.title !== undefined) input.title = checkOptionalText(problems, 'title', v.title, MAX_TITLE_CHARS);
  if (v.description !== undefined) {
    input.description = checkOptionalText(problems, 'description', v.description, MAX_DESCRIPTION_CHARS);
  }
  input.expiry = readExpiry(problems, v.expiry);
  if (v.expiry === null) problems.push({ field: 'expiry', message: `must be one of ${EXPIRY_VALUES.join(', ')}` });
  if (v.language !== undefined) input.language = readLanguage(problems, v.language);
  input.password = readPassword(problems, v.password);
  input.key = readKey(problems, v.key);
  input.burn = v.burn;
  input.downloadable = v.downloadable;
  input.encrypt = v.encrypt;
  if (v.encrypt !== undefined && v.content === undefined) {
    problems.push({ field: 'encrypt', message: 'can only be sent together with new content' });
  }
  if (Object.keys(raw).length === 0) problems.push({ field: '(body)', message: 'names no field to change' });
  if (problems.length > 0) throw invalidRequest(problems);
  if (v.content !== undefined) {
    const content = v.content as string;
    checkContent(content);
    if (v.encrypt) checkEncryptedContent(content);
    input.content = content;
  }
  for (const name of Object.keys(input) as Array<keyof UpdateInput>) {
    if (input[name] === undefined) delete input[name];
  }
  return input;
}

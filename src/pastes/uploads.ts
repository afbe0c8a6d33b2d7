/**
 * Upload rules (D17): the allowed extensions of api-v1.md, the textual MIME types, the UTF-8
 * check, the file name made safe for headers and pages, and the language an extension implies.
 */
import { extname } from 'node:path';

/** Extension (lower case, with the dot) → the highlighting language it implies, or null. */
const EXTENSIONS: Record<string, string | null> = {
  // Plain and data
  '.txt': null,
  '.log': null,
  '.csv': null,
  '.json': 'json',
  '.xml': 'xml',
  '.yaml': 'yaml',
  '.yml': 'yaml',
  '.toml': 'ini',
  '.ini': 'ini',
  '.cfg': 'ini',
  '.conf': 'ini',
  '.properties': 'properties',
  // Markup and documents
  '.md': 'markdown',
  '.rst': null,
  '.adoc': 'asciidoc',
  '.org': null,
  '.wiki': null,
  '.tex': 'latex',
  '.bib': 'latex',
  // Web
  '.html': 'html',
  '.htm': 'html',
  '.css': 'css',
  '.scss': 'scss',
  '.sass': 'scss',
  '.less': 'less',
  '.js': 'javascript',
  '.jsx': 'javascript',
  '.ts': 'typescript',
  '.tsx': 'typescript',
  '.vue': 'html',
  '.svelte': 'html',
  // Programming and query
  '.py': 'python',
  '.java': 'java',
  '.go': 'go',
  '.rs': 'rust',
  '.c': 'c',
  '.cpp': 'cpp',
  '.h': 'c',
  '.hpp': 'cpp',
  '.lua': 'lua',
  '.rb': 'ruby',
  '.swift': 'swift',
  '.kt': 'kotlin',
  '.kts': 'kotlin',
  '.scala': 'scala',
  '.pl': 'perl',
  '.pm': 'perl',
  '.tcl': 'tcl',
  '.r': 'r',
  '.sql': 'sql',
  '.awk': 'awk',
  '.sed': null,
  '.graphql': 'graphql',
  '.proto': 'protobuf',
  // Build, infrastructure, scripts
  '.dockerfile': 'dockerfile',
  '.makefile': 'makefile',
  '.mak': 'makefile',
  '.cmake': 'cmake',
  '.gradle': 'gradle',
  '.tf': 'hcl',
  '.hcl': 'hcl',
  '.bat': 'dos',
  '.ps1': 'powershell',
  '.gitignore': null,
  // Patches
  '.diff': 'diff',
  '.patch': 'diff',
};

export const ALLOWED_EXTENSIONS = Object.keys(EXTENSIONS);

/** Every language an uploaded file's extension implies. */
export const EXTENSION_LANGUAGES: readonly string[] = [
  ...new Set(Object.values(EXTENSIONS).filter((language) => language !== null)),
];

/** The lower-case extension of a file name; `.gitignore` counts as its own extension. */
export function extensionOf(filename: string): string {
  const lower = filename.toLowerCase();
  const ext = extname(lower);
  if (ext) return ext;
  return lower.startsWith('.') ? lower : '';
}

export function isAllowedExtension(filename: string): boolean {
  return Object.hasOwn(EXTENSIONS, extensionOf(filename));
}

export function languageForFilename(filename: string): string | null {
  return EXTENSIONS[extensionOf(filename)] ?? null;
}

const TEXTUAL_APPLICATION_TYPES = new Set([
  'application/json',
  'application/ld+json',
  'application/xml',
  'application/yaml',
  'application/x-yaml',
  'application/toml',
  'application/javascript',
  'application/x-javascript',
  'application/ecmascript',
  'application/typescript',
  'application/x-typescript',
  'application/x-sh',
  'application/x-shellscript',
  'application/x-csh',
  'application/x-perl',
  'application/x-python',
  'application/x-ruby',
  'application/x-php',
  'application/x-tex',
  'application/x-latex',
  'application/sql',
  'application/x-sql',
  'application/graphql',
  'application/x-httpd-php',
  'application/xhtml+xml',
  'application/x-patch',
  'application/x-diff',
  'application/x-bat',
  'application/x-powershell',
  'application/x-ndjson',
  'application/x-tcl',
  'application/octet-stream',
]);

/**
 * Types that the common MIME tables (Debian's /etc/mime.types, which Python's `mimetypes` and so
 * `requests` and `httpx` read; mime-db, which Node's `form-data` and so axios read; Windows'
 * registry; shared-mime-info) give an
 * allowed extension although their names do not say text: a client that declares what its
 * platform knows the file as is not refused for it. Taken only with that extension (a Lotus
 * Organizer file named `.txt` is not an Org file, an MPEG stream named `.txt` not TypeScript).
 * mime-db's `.bat` type, application/x-msdownload, is not among them: it is the type of `.exe`
 * and `.dll`, refused whatever the name.
 */
const TABLE_TYPES_OF_EXTENSION: Record<string, readonly string[]> = {
  '.bat': ['application/x-msdos-program'],
  '.org': ['application/vnd.lotus-organizer'],
  // Windows' registry gives .ts video/vnd.dlna.mpeg-tts (Chrome and Edge send it there).
  '.ts': ['video/mp2t', 'video/vnd.dlna.mpeg-tts'],
  // Windows' registry with Office installed (browsers and Python's mimetypes read it there).
  '.csv': ['application/vnd.ms-excel'],
  // freedesktop.org's shared-mime-info, which Linux desktops' file pickers read.
  '.awk': ['application/x-awk'],
};

/**
 * D17: the declared type must be textual (curl's default `application/octet-stream` included),
 * or the type the MIME tables give the file's own extension (TABLE_TYPES_OF_EXTENSION).
 */
export function isTextualMimeType(mimeType: string, filename = ''): boolean {
  const type = mimeType.split(';')[0]?.trim().toLowerCase() ?? '';
  if (type.startsWith('text/')) return true;
  if (TEXTUAL_APPLICATION_TYPES.has(type)) return true;
  if (filename !== '' && TABLE_TYPES_OF_EXTENSION[extensionOf(filename)]?.includes(type)) return true;
  return /^application\/[a-z0-9.-]+\+(json|xml|yaml)$/.test(type);
}

const fatalUtf8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

/** The bytes as text, or null when they are not UTF-8 or hold a NUL byte. */
export function decodeTextFile(bytes: Buffer): string | null {
  if (bytes.includes(0)) return null;
  try {
    return fatalUtf8.decode(bytes);
  } catch {
    return null;
  }
}

/** The longest file name kept, in UTF-16 code units (as the title's limit counts). */
export const MAX_FILENAME_CHARS = 200;

/** The longest extension kept whole when a name is cut (`.properties` is 11). */
const MAX_KEPT_EXTENSION = 16;

/**
 * A file name safe to store, show and put in a Content-Disposition header: no directories, no
 * control or bidirectional-override characters, at most MAX_FILENAME_CHARS characters. A longer
 * name is cut before its extension, which is kept: the extension decides whether the upload is
 * accepted and its language, and a name cut through it would be refused or mislabelled.
 */
export function safeFilename(raw: string): string {
  const base = raw.split(/[\\/]/).pop() ?? '';
  const cleaned = base
    // C0/C1 controls, and the bidi controls that can disguise an extension (U+202E and kin).
    .replace(/[\u0000-\u001f\u007f-\u009f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]/g, '')
    .replace(/^\.+$/, '')
    .trim();
  // Half of a surrogate pair (a name sent as UTF-16 can hold one, and a cut can make one) has no
  // UTF-8 form: SQLite would store bytes that are not UTF-8. With the u flag a whole pair is one
  // character, so only halves match.
  return cutKeepingExtension(cleaned).replace(/\p{Surrogate}/gu, '');
}

function cutKeepingExtension(name: string): string {
  if (name.length <= MAX_FILENAME_CHARS) return name;
  const ext = extname(name);
  if (ext.length === 0 || ext.length > MAX_KEPT_EXTENSION) return name.slice(0, MAX_FILENAME_CHARS);
  return name.slice(0, MAX_FILENAME_CHARS - ext.length) + ext;
}

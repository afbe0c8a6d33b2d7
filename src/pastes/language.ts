/**
 * Language detection, behind one function so that a better detector can replace it. Order:
 * the extension of an uploaded file; then unmistakable signatures (shebang, `<?php`, a diff, a
 * JSON document); then a fast score of characteristic tokens over the head of the paste; and only
 * when that is ambiguous, flourite on a short sample. flourite alone costs 1 to 70 ms a paste
 * (its patterns backtrack on long lines), too slow for the quick-create path, so it is the
 * tie-breaker rather than the first resort. Content with no sign of code is plain text (null).
 */
import flouriteModule from 'flourite';
import { languageForFilename } from './uploads.js';

// The ESM build exports the function as default; the CommonJS typings describe a namespace.
const flourite = flouriteModule as unknown as (
  snippet: string,
  options?: { noUnknown?: boolean },
) => { language: string };

/** flourite's names → the highlighting names fastpaste stores. */
const FLOURITE_NAMES: Record<string, string> = {
  C: 'c',
  'C++': 'cpp',
  'C#': 'csharp',
  Clojure: 'clojure',
  CSS: 'css',
  Dart: 'dart',
  Dockerfile: 'dockerfile',
  Elixir: 'elixir',
  Go: 'go',
  HTML: 'html',
  Java: 'java',
  Javascript: 'javascript',
  JSON: 'json',
  Julia: 'julia',
  Kotlin: 'kotlin',
  Lua: 'lua',
  Markdown: 'markdown',
  Pascal: 'pascal',
  PHP: 'php',
  Python: 'python',
  Ruby: 'ruby',
  Rust: 'rust',
  Scala: 'scala',
  SQL: 'sql',
  Bash: 'bash',
  Typescript: 'typescript',
  YAML: 'yaml',
};

/** How much of the head is scored. */
const SAMPLE_CHARS = 4096;
/** flourite's sample: a few short lines keep it near a millisecond. */
const FLOURITE_LINES = 12;
const FLOURITE_LINE_CHARS = 120;

/**
 * Characteristic patterns and their weight per language (each counted at most 3 times), each with
 * the literals one of which any match of it contains (null: none named). A pattern none of whose
 * literals is in the sample cannot match and is not run: the includes() take about 2 µs for a
 * 1 KB paste, the 36 patterns about 19 µs, and most quick-creates (logs, prose, output) are
 * decided by the literals alone. test/language.test.ts holds every literal list to its pattern.
 */
export const FEATURES: ReadonlyArray<readonly [string, RegExp, number, readonly string[] | null]> = [
  ['python', /^[ \t]*def \w+\(.*\)\s*(->\s*[\w[\], .]+)?:[ \t]*$/gm, 4, ['def ']],
  ['python', /^[ \t]*(elif .*|else|try|finally|except.*)\s*:[ \t]*$/gm, 3, [':']],
  ['python', /^[ \t]*(from [\w.]+ )?import [\w.]+( as \w+)?[ \t]*$/gm, 2, ['import ']],
  [
    'python',
    /\bself\.\w+|\bNone\b|\bTrue\b|\bFalse\b|__\w+__|\bprint\(/g,
    1,
    ['self.', 'None', 'True', 'False', '__', 'print('],
  ],
  ['python', /^[ \t]*class \w+(\(.*\))?:[ \t]*$/gm, 4, ['class ']],
  ['javascript', /\b(const|let|var) \w+ = (require\(|async |function|\(|\[|\{|new |await )/g, 2, [' = ']],
  [
    'javascript',
    /\bfunction\s*\w*\s*\([^)]*\)\s*\{|=>\s*[{(]|\bconsole\.log\(|\bmodule\.exports\b|\bdocument\.\w+/g,
    2,
    ['function', '=>', 'console.log(', 'module.exports', 'document.'],
  ],
  ['javascript', /^[ \t]*(import .* from ['"].*['"]|export (default |const |function ))/gm, 2, ['import ', 'export ']],
  [
    'typescript',
    /:\s*(string|number|boolean|void|any|unknown)\b[;,)=\]]|\binterface \w+\s*\{|\btype \w+ = |\bas const\b/g,
    3,
    [':', 'interface ', 'type ', 'as const'],
  ],
  ['typescript', /\b(public|private|readonly) \w+:|<\w+>\(/g, 1, ['public ', 'private ', 'readonly ', '>(']],
  [
    'java',
    /\bpublic (static )?(final )?(class|void|interface)\b|\bSystem\.out\.print|\bprivate final \w+/g,
    3,
    ['public ', 'System.out.print', 'private final '],
  ],
  ['java', /^[ \t]*(package [\w.]+;|import [\w.]+(\.\*)?;)[ \t]*$/gm, 3, [';']],
  ['c', /^[ \t]*#include\s*<\w+\.h>/gm, 4, ['#include']],
  ['c', /\b(printf|malloc|free|sizeof)\(|\bint main\(|->\w+/g, 1, ['(', '->']],
  ['cpp', /^[ \t]*#include\s*<\w+>[ \t]*$/gm, 4, ['#include']],
  [
    'cpp',
    /\bstd::\w+|\bcout\s*<<|\btemplate\s*<|\bnamespace \w+|\bnullptr\b/g,
    3,
    ['std::', 'cout', 'template', 'namespace ', 'nullptr'],
  ],
  ['csharp', /^[ \t]*using System(\.\w+)*;[ \t]*$/gm, 4, ['using System']],
  [
    'csharp',
    /\bnamespace [\w.]+|\bpublic (async )?(override )?\w+ \w+\(.*\)[ \t]*$|\bConsole\.Write(Line)?\(|\bvar \w+ = new /gm,
    2,
    ['namespace ', 'public ', 'Console.Write', 'var '],
  ],
  ['go', /^[ \t]*package \w+[ \t]*$|^[ \t]*func (\(\w+ \*?\w+\) )?\w+\(/gm, 4, ['package ', 'func ']],
  [
    'go',
    /:= |\bfmt\.\w+\(|\bgo func\b|\bchan \w+|\berr != nil\b/g,
    2,
    [':= ', 'fmt.', 'go func', 'chan ', 'err != nil'],
  ],
  [
    'rust',
    /^[ \t]*(pub )?fn \w+(<.*>)?\(|\blet mut \w+|\bimpl\b.*\{|\bprintln!\(|\bmatch \w+ \{|::new\(|&mut \w+/gm,
    3,
    ['fn ', 'let mut ', 'impl', 'println!(', 'match ', '::new(', '&mut '],
  ],
  ['rust', /^[ \t]*use [\w:]+(::\{.*\})?;[ \t]*$/gm, 2, ['use ']],
  [
    'ruby',
    /^[ \t]*(def \w+[?!]?(\(.*\))?|end|module \w+|require ['"].*['"])[ \t]*$/gm,
    2,
    ['def ', 'end', 'module ', 'require '],
  ],
  ['ruby', /\bputs\b|\.each do\b|\bdo \|\w+\||\battr_(accessor|reader)\b/g, 3, ['puts', '.each do', 'do |', 'attr_']],
  ['php', /\$\w+\s*=|\becho\b|->\w+\(|\bfunction \w+\(\$/g, 1, ['$', 'echo', '->']],
  [
    'bash',
    /^[ \t]*(if \[\[? .*\]\]?;? ?(then)?|fi|done|esac|export \w+=|echo ["$]|for \w+ in .*; do)[ \t]*$/gm,
    3,
    ['if [', 'fi', 'done', 'esac', 'export ', 'echo ', 'for '],
  ],
  [
    'bash',
    /\$\{\w+[^}\n]{0,100}\}|\$\(\w+|\b(apt-get|sudo|grep|awk|sed|chmod|mkdir) /g,
    1,
    ['$', 'apt-get ', 'sudo ', 'grep ', 'awk ', 'sed ', 'chmod ', 'mkdir '],
  ],
  [
    'sql',
    /\b(SELECT|INSERT INTO|UPDATE|DELETE FROM|CREATE TABLE|ALTER TABLE|WHERE|JOIN|GROUP BY|ORDER BY)\b/gi,
    2,
    null,
  ],
  ['html', /<\/?(div|span|p|a|ul|li|body|head|script|table|tr|td|h[1-6])\b[^>\n]{0,200}>/gi, 2, ['<']],
  [
    'css',
    /^[ \t]*[.#]?[\w-]+(?:[ \t]*[.#:>,][ \t]*[\w-]+){0,4}[ \t]*\{[ \t]*$|^[ \t]*[\w-]+:[ \t]*[^;\n]{1,80};[ \t]*$/gm,
    2,
    ['{', ';'],
  ],
  ['yaml', /^[ \t]*[\w-]+:\s+\S.*$|^[ \t]*- [\w-]+:\s/gm, 1, [':']],
  ['markdown', /^#{1,6} \S|^[ \t]*[-*] \[[ x]\] |^```|\[[^\]\n]{1,200}\]\([^)\n]{1,200}\)/gm, 2, ['#', '[', '```']],
  ['kotlin', /\bfun \w+\(|\bval \w+ = |\bdata class\b|\bprintln\(/g, 3, ['fun ', 'val ', 'data class', 'println(']],
  [
    'swift',
    /\bfunc \w+\(.*\) -> |\bguard let\b|\bvar \w+: \w+|\bimport (UIKit|Foundation|SwiftUI)\b/g,
    3,
    ['func ', 'guard let', 'var ', 'import '],
  ],
  [
    'lua',
    /\blocal \w+ = |\bfunction \w+[.:]?\w*\(|\bthen\b|\belseif\b|\bend\b/g,
    1,
    ['local ', 'function ', 'then', 'elseif', 'end'],
  ],
  ['ini', /^[ \t]*\[[\w .-]+\][ \t]*$/gm, 2, ['[']],
];

/** Every language detectLanguage can name besides the extensions' (uploads.ts EXTENSION_LANGUAGES). */
export const DETECTED_LANGUAGES: readonly string[] = [
  ...new Set([
    ...FEATURES.map(([language]) => language),
    ...Object.values(FLOURITE_NAMES),
    // What signature() and looksLikeJson() name.
    ...['python', 'javascript', 'bash', 'ruby', 'perl', 'php', 'xml', 'html', 'diff', 'dockerfile', 'json'],
  ]),
];

/** Unmistakable openings, decided before any scoring. */
function signature(sample: string): string | null {
  const head = sample.trimStart();
  const shebang = /^#!\S*?(?:env\s+)?(bash|sh|zsh|python3?|node|ruby|perl)\b/.exec(head);
  if (shebang) {
    const name = shebang[1] as string;
    return name.startsWith('python')
      ? 'python'
      : name === 'node'
        ? 'javascript'
        : ['sh', 'zsh'].includes(name)
          ? 'bash'
          : name;
  }
  if (head.startsWith('<?php')) return 'php';
  if (head.startsWith('<?xml')) return 'xml';
  if (/^<!doctype html|^<html\b/i.test(head)) return 'html';
  if (/^diff --git |^--- \S.*\n\+\+\+ \S/m.test(head) && /^@@ /m.test(head)) return 'diff';
  if (/^FROM \S+/m.test(head) && /^(RUN|CMD|COPY|ENTRYPOINT|WORKDIR) /m.test(head)) return 'dockerfile';
  return null;
}

function looksLikeJson(content: string): boolean {
  const text = content.trim();
  if (text.length < 2 || text.length > 256 * 1024) return false;
  const first = text[0];
  const last = text[text.length - 1];
  if (!((first === '{' && last === '}') || (first === '[' && last === ']'))) return false;
  try {
    JSON.parse(text);
    return true;
  } catch {
    return false;
  }
}

function score(sample: string): Map<string, number> {
  const scores = new Map<string, number>();
  for (const [language, pattern, weight, literals] of FEATURES) {
    if (literals !== null && !literals.some((literal) => sample.includes(literal))) continue;
    pattern.lastIndex = 0;
    let hits = 0;
    while (hits < 3 && pattern.exec(sample) !== null) hits++;
    if (hits > 0) scores.set(language, (scores.get(language) ?? 0) + hits * weight);
  }
  // TypeScript is JavaScript with types: its own signs decide between them.
  if ((scores.get('typescript') ?? 0) >= 3)
    scores.set('typescript', (scores.get('typescript') ?? 0) + (scores.get('javascript') ?? 0));
  return scores;
}

function flouriteGuess(sample: string): string | null {
  const lines = sample
    .split('\n', FLOURITE_LINES)
    .map((line) => line.slice(0, FLOURITE_LINE_CHARS))
    .join('\n');
  return FLOURITE_NAMES[flourite(lines, { noUnknown: false }).language] ?? null;
}

/** The language of a paste, or null for plain text or when nothing fits. */
export function detectLanguage(content: string, filename?: string | null): string | null {
  if (filename) {
    const byExtension = languageForFilename(filename);
    if (byExtension) return byExtension;
  }
  const sample = content.length > SAMPLE_CHARS ? content.slice(0, SAMPLE_CHARS) : content;
  const signed = signature(sample);
  if (signed) return signed;
  if (looksLikeJson(content)) return 'json';
  const ranked = [...score(sample).entries()].sort((a, b) => b[1] - a[1]);
  const [best, second] = ranked;
  if (!best || best[1] < 3) return null; // no sign of code: plain text
  if (!second || best[1] >= 2 * second[1]) return best[0];
  // Two languages close: flourite, on a short sample, breaks the tie when it names one of them.
  const guess = flouriteGuess(sample);
  return guess && ranked.slice(0, 3).some(([name]) => name === guess) ? guess : best[0];
}

/** A language name as a client may give it: short, lower-cased, no markup. */
export function normalizeLanguage(value: string): string | null {
  const name = value.trim().toLowerCase();
  return /^[a-z0-9][a-z0-9+#._-]{0,39}$/.test(name) ? name : null;
}

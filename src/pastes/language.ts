/**
 * Language detection, kept behind one function so that a better detector can replace it: the
 * extension of an uploaded file decides first, then flourite guesses from the content.
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

/** Only the head of a large paste is looked at: the guess does not improve, the time does. */
const SAMPLE_CHARS = 16_384;

/** The language of a paste, or null when nothing fits. */
export function detectLanguage(content: string, filename?: string | null): string | null {
  if (filename) {
    const byExtension = languageForFilename(filename);
    if (byExtension) return byExtension;
  }
  const sample = content.length > SAMPLE_CHARS ? content.slice(0, SAMPLE_CHARS) : content;
  const guess = flourite(sample, { noUnknown: false }).language;
  return FLOURITE_NAMES[guess] ?? null;
}

/** A language name as a client may give it: short, lower-cased, no markup. */
export function normalizeLanguage(value: string): string | null {
  const name = value.trim().toLowerCase();
  return /^[a-z0-9][a-z0-9+#._-]{0,39}$/.test(name) ? name : null;
}

/**
 * highlight.js for the browser, served as /static/highlight.js: view.js highlights an end-to-end
 * encrypted paste after decrypting it (the server never sees its text), with the stored language.
 * Bundled by esbuild from the same highlight.js the server uses (so the class names, and style.css,
 * match): its core and the languages fastpaste itself names (detection and upload extensions),
 * about 190 KB instead of the whole library's 1 MB. A language outside them is shown plain.
 *
 * bin/build.js writes the bundle into the build next to view.js; a server running from the
 * sources (the tests) bundles it on its first request for it instead.
 */
import { existsSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { DETECTED_LANGUAGES } from '../../pastes/language.js';
import { EXTENSION_LANGUAGES } from '../../pastes/uploads.js';
import { LANGUAGE_MODULES, MAX_HIGHLIGHT_BYTES } from './highlight.js';

/** The file's name under static/ (in the build) and /static/ (the address). */
export const BROWSER_HIGHLIGHTER = 'highlight.js';

/** The global the bundle defines: (text, language) → highlighted HTML, or null to show it plain. */
const GLOBAL = 'fastpasteHighlight';

/** The highlight.js modules (lib/languages/<name>) that define the languages fastpaste names. */
export function browserLanguages(): string[] {
  // An alias (html) names a module (xml), which registers its aliases itself.
  const modules = [...DETECTED_LANGUAGES, ...EXTENSION_LANGUAGES].map((name) => LANGUAGE_MODULES.get(name));
  return [...new Set(modules.filter((module) => module !== undefined))].sort();
}

/** The browser bundle: highlight.js's core, those languages, and the server's size cap. */
export async function bundleBrowserHighlighter(): Promise<Buffer> {
  const { build } = await import('esbuild');
  const languages = browserLanguages();
  const contents = [
    "import hljs from 'highlight.js/lib/core';",
    ...languages.map((name, i) => `import l${i} from 'highlight.js/lib/languages/${name}';`),
    ...languages.map((name, i) => `hljs.registerLanguage(${JSON.stringify(name)}, l${i});`),
    // As highlight.ts: nothing over the cap, the same options, so the same spans.
    `globalThis.${GLOBAL} = (text, language) =>`,
    `  !language || text.length > ${MAX_HIGHLIGHT_BYTES} || !hljs.getLanguage(language)`,
    '    ? null',
    '    : hljs.highlight(text, { language, ignoreIllegals: true }).value;',
  ].join('\n');
  const result = await build({
    // Packages resolve from here up to the project's node_modules, from src/ or from .build/.
    stdin: { contents, resolveDir: fileURLToPath(new URL('.', import.meta.url)), sourcefile: 'highlight-entry.js' },
    bundle: true,
    minify: true,
    format: 'iife',
    platform: 'browser',
    target: 'es2020',
    write: false,
    logLevel: 'error',
  });
  return Buffer.from((result.outputFiles[0] as { contents: Uint8Array }).contents);
}

let bundle: Promise<Buffer> | null = null;

/** The bundle: the built file when there is one, else made once per process (a failure is retried). */
export function browserHighlighter(): Promise<Buffer> {
  if (bundle === null) {
    const built = new URL(`./static/${BROWSER_HIGHLIGHTER}`, import.meta.url);
    bundle = existsSync(built) ? Promise.resolve(readFileSync(built)) : bundleBrowserHighlighter();
    bundle.catch(() => {
      bundle = null;
    });
  }
  return bundle;
}

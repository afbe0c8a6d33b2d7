/**
 * Server-side syntax highlighting for the view page, bounded in size so it stays fast, with the
 * result kept for pastes read again (keyed by content digest and language, so an edited paste is
 * highlighted anew). Highlighting 10 KB costs milliseconds; a cached page costs nothing.
 *
 * highlight.js's core is loaded with none of its languages: a language's module (and those of
 * the languages it embeds, such as css and javascript in xml) is loaded when a paste first needs
 * it (http, whose body is guessed among every language, loads them all). All 193 at start would
 * hold about 5.7 MB of heap for the life of the server, most of it for languages no paste uses.
 * The output is the whole library's (test/highlight-languages.test.ts).
 */
import { createRequire } from 'node:module';
import hljs from 'highlight.js/lib/core';
import { HIGHLIGHT_LANGUAGES } from './highlight-languages.js';

/** Larger pastes are shown escaped but not highlighted. */
// 128 KiB takes about 0.3 s to highlight the first time (the event loop waits meanwhile).
export const MAX_HIGHLIGHT_BYTES = 128 * 1024;
const CACHE_BYTES = 32 * 1024 * 1024;

const cache = new Map<string, Buffer>();
let cachedBytes = 0;

/** Every name highlight.js knows a language by (lower-cased) → the module that defines it. */
export const LANGUAGE_MODULES: ReadonlyMap<string, string> = new Map(
  Object.entries(HIGHLIGHT_LANGUAGES).flatMap(([module, aliases]) => [
    [module, module] as const,
    ...aliases.map((alias) => [alias, module] as const),
  ]),
);

const require = createRequire(import.meta.url);

type Core = typeof hljs;
/** The modules registered with each core (this module's, or a test's own instance). */
const loadedBy = new WeakMap<Core, Set<string>>();

/**
 * The languages a definition hands parts of its text to (`subLanguage`), by name; `all` when one
 * of them is an empty list, which highlight.js reads as "guess among every registered language"
 * (http's message body).
 */
function embeddedLanguages(definition: object): string[] | 'all' {
  const names: string[] = [];
  const seen = new Set<object>();
  const stack: unknown[] = [definition];
  while (stack.length > 0) {
    const mode = stack.pop();
    if (typeof mode !== 'object' || mode === null || seen.has(mode)) continue;
    seen.add(mode);
    if (Array.isArray(mode)) {
      stack.push(...mode);
      continue;
    }
    const { subLanguage, contains, variants, starts } = mode as Record<string, unknown>;
    if (typeof subLanguage === 'string') names.push(subLanguage);
    else if (Array.isArray(subLanguage)) {
      if (subLanguage.length === 0) return 'all';
      names.push(...(subLanguage as string[]));
    }
    stack.push(contains, variants, starts);
  }
  return names;
}

/**
 * Registers a module's language with the core, and those it embeds, once. A language that
 * guesses among all of them has every module registered, in the whole library's order (the
 * guess breaks ties by that order), the ones already there registered again.
 */
function load(core: Core, module: string): void {
  let loaded = loadedBy.get(core);
  if (loaded === undefined) {
    loaded = new Set();
    loadedBy.set(core, loaded);
  }
  if (loaded.has(module)) return;
  core.registerLanguage(module, require(`highlight.js/lib/languages/${module}`));
  loaded.add(module);
  const definition = core.getLanguage(module);
  const embedded = definition ? embeddedLanguages(definition) : [];
  if (embedded === 'all') {
    for (const name of core.listLanguages()) core.unregisterLanguage(name);
    for (const every of Object.keys(HIGHLIGHT_LANGUAGES)) {
      core.registerLanguage(every, require(`highlight.js/lib/languages/${every}`));
      loaded.add(every);
    }
    return;
  }
  for (const name of embedded) {
    const embeddedModule = LANGUAGE_MODULES.get(name.toLowerCase());
    if (embeddedModule) load(core, embeddedModule);
  }
}

/**
 * The highlight.js module of a language name or alias, registered with the core (with what it
 * embeds); null when highlight.js has no such language or its module would not load.
 */
function highlightModule(language: string, core: Core = hljs): string | null {
  const module = LANGUAGE_MODULES.get(language.toLowerCase());
  if (module === undefined) return null;
  try {
    load(core, module);
  } catch {
    return null;
  }
  return module;
}

/** highlight.js's HTML for the text in a language, as the whole library makes it; null: no such language. */
export function highlightHtml(content: string, language: string, core: Core = hljs): string | null {
  const module = highlightModule(language, core);
  return module === null ? null : core.highlight(content, { language: module, ignoreIllegals: true }).value;
}

/**
 * Highlighted HTML (escaped by highlight.js) as UTF-8 bytes, or null when the language or size
 * does not allow.
 */
export function highlight(content: string, language: string | null, sha256: string): Buffer | null {
  if (!language || content.length > MAX_HIGHLIGHT_BYTES) return null;
  const key = `${language}:${sha256}`;
  const hit = cache.get(key);
  if (hit !== undefined) {
    // Most recently used last, so the oldest is evicted first.
    cache.delete(key);
    cache.set(key, hit);
    return hit;
  }
  const highlighted = highlightHtml(content, language);
  if (highlighted === null) return null;
  const html = Buffer.from(highlighted);
  cache.set(key, html);
  cachedBytes += html.length;
  for (const [oldKey, oldHtml] of cache) {
    if (cachedBytes <= CACHE_BYTES) break;
    cache.delete(oldKey);
    cachedBytes -= oldHtml.length;
  }
  return html;
}

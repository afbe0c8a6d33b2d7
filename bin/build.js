// Compiles src/ (TypeScript) to plain JavaScript under .build/<digest of the sources>/ with
// esbuild, once per version of the sources: the server then runs without a TypeScript loader,
// whose hooks live in a thread of their own (about 45 MB of memory). A digest of every source's
// path, size and modification time names the build, so an edited source is rebuilt on the next
// start (about half a second) and processes starting together share one build.
import { createHash } from 'node:crypto';
import {
  cpSync,
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');
const SRC = join(ROOT, 'src');
const BUILDS = join(ROOT, '.build');
/** Builds kept besides the current one: a server started earlier may still be running one. */
const KEEP = 3;
/** Calls of ensureBuilt in this process compiling now (they share esbuild's one service). */
let buildsUnderWay = 0;

function sourceFiles(dir, out = []) {
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) sourceFiles(path, out);
    else out.push(path);
  }
  return out;
}

/**
 * The directory holding the compiled sources (their src/ tree), building it if needed; under
 * `builds` (.build/ but in tests).
 */
export async function ensureBuilt(builds = BUILDS) {
  const files = sourceFiles(SRC).sort();
  const digest = createHash('sha256');
  for (const file of files) {
    const stat = statSync(file);
    digest.update(`${relative(ROOT, file)}\0${stat.size}\0${stat.mtimeMs}\n`);
  }
  // The browser's highlight.js is bundled from the installed package (below).
  const highlightJs = join(ROOT, 'node_modules', 'highlight.js', 'package.json');
  if (existsSync(highlightJs)) digest.update(readFileSync(highlightJs));
  const name = digest.digest('hex').slice(0, 16);
  const target = join(builds, name);
  if (existsSync(join(target, 'complete'))) return target;

  const { build, stop } = await import('esbuild');
  const scratch = join(builds, `tmp-${process.pid}-${Date.now()}-${buildsUnderWay}`);
  mkdirSync(scratch, { recursive: true });
  buildsUnderWay++;
  try {
    await build({
      entryPoints: files.filter((file) => file.endsWith('.ts')),
      outdir: join(scratch, 'src'),
      outbase: SRC,
      format: 'esm',
      platform: 'node',
      target: 'node20',
      logLevel: 'error',
    });
    for (const file of files.filter((file) => !file.endsWith('.ts'))) {
      cpSync(file, join(scratch, 'src', relative(SRC, file)));
    }
    // ESM resolution of packages walks up from the build to the project's node_modules.
    writeFileSync(join(scratch, 'package.json'), '{ "type": "module" }\n');
    // highlight.js for the browser (served as /static/highlight.js), made by the compiled module.
    const web = join(scratch, 'src', 'http', 'web');
    const { BROWSER_HIGHLIGHTER, bundleBrowserHighlighter } = await import(
      pathToFileURL(join(web, 'browser-highlighter.js')).href
    );
    writeFileSync(join(web, 'static', BROWSER_HIGHLIGHTER), await bundleBrowserHighlighter());
    writeFileSync(join(scratch, 'complete'), `${new Date().toISOString()}\n`);
    renameSync(scratch, target);
  } catch (err) {
    rmSync(scratch, { recursive: true, force: true });
    // Another process finished the same build first: use it.
    if (!existsSync(join(target, 'complete'))) throw err;
  } finally {
    // esbuild's service process would otherwise stay beside the server for as long as it runs.
    // It is one for the whole process, and a build still using it when it stops never settles:
    // the last build of this process under way stops it.
    if (--buildsUnderWay === 0) await stop();
  }
  prune(builds, name);
  return target;
}

function prune(builds, current) {
  try {
    const kept = readdirSync(builds)
      .filter((entry) => entry !== current && !entry.startsWith('tmp-'))
      .map((entry) => ({ entry, time: statSync(join(builds, entry)).mtimeMs }))
      .sort((a, b) => b.time - a.time);
    for (const { entry } of kept.slice(KEEP)) rmSync(join(builds, entry), { recursive: true, force: true });
  } catch {
    // Pruning is tidiness only.
  }
}

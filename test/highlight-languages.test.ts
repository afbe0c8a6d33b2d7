/**
 * The server's highlighter loads highlight.js's languages one by one as pastes need them
 * (src/http/web/highlight.ts). These tests hold it to the whole library: the same list of
 * languages and names, the same HTML for every name, and nothing loaded that no paste asked for.
 * The whole library is loaded in a child process only: in this one it would register every
 * language into the core the server's highlighter uses, and the tests could not fail.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { describe, it } from 'node:test';
import hljs from 'highlight.js/lib/core';
import { highlight, highlightHtml, LANGUAGE_MODULES } from '../src/http/web/highlight.js';
import { HIGHLIGHT_LANGUAGES } from '../src/http/web/highlight-languages.js';
import { request, startServer } from './helpers.js';

/** Texts with something for most languages: markup embedding style and script, code, a shell. */
const SAMPLES = [
  `<!doctype html>
<html><head><style>body { color: #333; margin: 0 }</style>
<script>const x = { a: 1, "b": 'two' }; function f(n) { return n * 2; } // note</script></head>
<body class="main"><p id=p1>Text &amp; more {{ name | upper }} <%= value %></p></body></html>`,
  `#!/usr/bin/env bash
# A comment
import os, sys
def handler(event, context=None):
    """Docstring"""
    return {"status": 200, 'body': f"{event!r}"}  # trailing
SELECT id, name FROM users WHERE age > 21 AND name LIKE 'a%';
public static int main(String[] args) { int i = 0x1F; while (i-- > 0) printf("%d\\n", i); }
$ ls -la | grep "x" > out.txt
>>> print(1 + 2)
3
---
key: [1, 2.5, true, null]
`,
  // http hands its body to a guess among every language highlight.js has.
  `POST /api/v1/paste HTTP/1.1
Host: example.test
Content-Type: application/json

{"content": "print(1)", "language": "python", "expiry": [1, true, null]}
`,
  // A body whose guess is a tie (python and 1c score alike), broken by the library's order.
  'HTTP/1.1 200 OK\nX: y\n\n# title\n',
];

/** What the whole highlight.js answers, from a child process: its names, and HTML per name and sample. */
function wholeLibrary(): { languages: Record<string, string[]>; html: Record<string, string[]> } {
  const script = `
    const hljs = require('highlight.js');
    const samples = ${JSON.stringify(SAMPLES)};
    const names = new Map();
    for (const name of hljs.listLanguages()) for (const alias of hljs.getLanguage(name).aliases ?? []) names.set(alias.toLowerCase(), name);
    for (const name of hljs.listLanguages()) names.set(name, name);
    const languages = {};
    for (const name of hljs.listLanguages()) languages[name] = [...names].filter(([a, m]) => m === name && a !== name).map(([a]) => a);
    const html = {};
    for (const name of names.keys()) html[name] = samples.map((s) => hljs.highlight(s, { language: name, ignoreIllegals: true }).value);
    process.stdout.write(JSON.stringify({ languages, html }));`;
  return JSON.parse(execFileSync(process.execPath, ['-e', script], { maxBuffer: 256 * 1024 * 1024 }).toString());
}

const sha256 = (text: string) => createHash('sha256').update(text).digest('hex');

describe("the server's highlighter loads languages as pastes need them", () => {
  it('loads none at start, and for a paste only its language and those it embeds', async () => {
    // A server started in this process: none of its modules may load the whole library.
    const server = await startServer();
    try {
      assert.deepEqual(hljs.listLanguages(), []);
      const key = await server.createKey();
      const created = await request(`${server.url}/api/v1/paste`, {
        method: 'POST',
        headers: { 'x-api-key': key },
        json: { content: 'def f():\n    return 1\n', language: 'py' },
      });
      assert.equal(created.status, 201, created.text);
      const page = await request(`${server.url}/view/${created.body.data.paste_id}`);
      assert.equal(page.status, 200);
      assert.match(page.text, /<span class="hljs-keyword">def<\/span>/);
      assert.deepEqual(hljs.listLanguages(), ['python']);
    } finally {
      await server.close();
    }
    // html is xml's alias; xml hands <style> to css and <script> to javascript, which embeds
    // graphql (and css, xml) in its template strings.
    assert.ok(highlight(SAMPLES[0] as string, 'html', sha256('html sample')));
    assert.deepEqual(hljs.listLanguages().sort(), ['css', 'graphql', 'javascript', 'python', 'xml']);
    assert.equal(highlight('text', 'no-such-language', sha256('text')), null);
  });

  it('knows the names the installed highlight.js knows, each for the same language', () => {
    const whole = wholeLibrary();
    // In the library's order too: a guess among all languages breaks ties by it.
    assert.deepEqual(Object.keys(HIGHLIGHT_LANGUAGES), Object.keys(whole.languages));
    assert.deepEqual(
      HIGHLIGHT_LANGUAGES,
      whole.languages,
      `src/http/web/highlight-languages.ts should read:\n${JSON.stringify(whole.languages, null, 2)}`,
    );
    assert.equal(LANGUAGE_MODULES.size, Object.keys(whole.html).length);
  });

  it('makes the HTML the whole library makes, for every name and alias, each loaded alone', () => {
    const whole = wholeLibrary();
    let compared = 0;
    for (const [name, expected] of Object.entries(whole.html)) {
      SAMPLES.forEach((sample, i) => {
        // A core of its own for each: a language that failed to load what it embeds must not be
        // saved by one an earlier name loaded.
        assert.equal(highlightHtml(sample, name, hljs.newInstance()), expected[i], `${name}, sample ${i}`);
        compared++;
      });
    }
    assert.ok(compared > 1000, `${compared} compared`);
    // The tie again, in a core that had python before http: the guess still picks 1c, as the
    // whole library does (every language registered again in its order).
    const core = hljs.newInstance();
    highlightHtml('x', 'python', core);
    assert.equal(highlightHtml(SAMPLES[3] as string, 'http', core), whole.html.http?.[3]);
    assert.match(whole.html.http?.[3] ?? '', /language-1c/);
  });
});

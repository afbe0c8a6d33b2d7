/** Language detection: the right name for typical pastes of each language, null for prose. */
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { detectLanguage, FEATURES } from '../src/pastes/language.js';

/** The repository, whatever directory the tests run from. */
const ROOT = fileURLToPath(new URL('..', import.meta.url));

const samples: Array<[string, string]> = [
  [
    'python',
    'import os\n\ndef main(args):\n    for a in args:\n        print(a)\n    return None\n\nif __name__ == "__main__":\n    main([])\n',
  ],
  [
    'javascript',
    'const fs = require("fs");\nfunction read(p) {\n  return fs.readFileSync(p, "utf8");\n}\nconsole.log(read("x"));\n',
  ],
  [
    'typescript',
    'interface User {\n  name: string;\n  age: number;\n}\nexport function greet(u: User): string {\n  return "hi " + u.name;\n}\n',
  ],
  [
    'java',
    'package com.example;\n\nimport java.util.List;\n\npublic class Main {\n  public static void main(String[] args) {\n    System.out.println("hi");\n  }\n}\n',
  ],
  [
    'c',
    '#include <stdio.h>\n#include <stdlib.h>\n\nint main(void) {\n  char *p = malloc(10);\n  printf("%s", p);\n  free(p);\n  return 0;\n}\n',
  ],
  [
    'cpp',
    '#include <iostream>\n#include <vector>\n\nint main() {\n  std::vector<int> v{1,2};\n  std::cout << v.size() << std::endl;\n}\n',
  ],
  [
    'go',
    'package main\n\nimport "fmt"\n\nfunc main() {\n\tx := 5\n\tif err != nil {\n\t\treturn\n\t}\n\tfmt.Println(x)\n}\n',
  ],
  [
    'rust',
    'use std::collections::HashMap;\n\nfn main() {\n    let mut m = HashMap::new();\n    m.insert(1, 2);\n    println!("{:?}", m);\n}\n',
  ],
  [
    'ruby',
    'require "json"\n\nclass Dog\n  attr_accessor :name\n  def bark\n    puts "woof"\n  end\nend\n[1,2].each do |x|\n  puts x\nend\n',
  ],
  ['php', '<?php\n$x = 5;\necho $x;\nfunction f($a) { return $a; }\n'],
  ['bash', '#!/bin/bash\nset -e\nfor f in *.txt; do\n  echo "$f"\ndone\n'],
  [
    'sql',
    'SELECT u.id, count(*)\nFROM users u\nJOIN orders o ON o.user_id = u.id\nWHERE u.active = 1\nGROUP BY u.id\nORDER BY 2 DESC;\n',
  ],
  ['json', '{"name": "fastpaste", "version": 1, "tags": ["a", "b"]}'],
  ['yaml', 'name: build\non:\n  push:\n    branches: [main]\njobs:\n  test:\n    runs-on: ubuntu-latest\n'],
  ['html', '<div class="x">\n  <p>Hello <a href="/">home</a></p>\n  <ul><li>one</li></ul>\n</div>\n'],
  ['css', 'body {\n  margin: 0;\n  color: #333;\n}\n.header {\n  display: flex;\n}\n'],
  ['markdown', '# Title\n\nSome text with a [link](https://x.y).\n\n## Section\n\n- item\n- item\n\n```\ncode\n```\n'],
  ['diff', 'diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1,2 +1,2 @@\n-old\n+new\n'],
  [
    'csharp',
    'using System;\n\nnamespace App {\n  class Program {\n    static void Main() {\n      Console.WriteLine("hi");\n    }\n  }\n}\n',
  ],
  ['kotlin', 'fun main() {\n    val x = listOf(1, 2)\n    println(x)\n}\ndata class P(val a: Int)\n'],
  [null as unknown as string, 'The quick brown fox jumps over the lazy dog. It was a sunny day and we went out.\n'],
  [null as unknown as string, `${'x'.repeat(1023)}\n`],
];

describe('detectLanguage', () => {
  for (const [want, text] of samples) {
    it(`detects ${want ?? 'plain text'}: ${JSON.stringify(text.slice(0, 30))}`, () => {
      assert.equal(detectLanguage(text), want);
    });
  }

  it('takes the extension of an upload over the content', () => {
    assert.equal(detectLanguage('SELECT 1;', 'query.py'), 'python');
  });

  it('gives null for one long line of letters', () => {
    assert.equal(detectLanguage('a'.repeat(4096)), null);
  });

  it('runs no pattern whose literals are all missing that could have matched (the literal lists are exact)', () => {
    // Real text of many kinds: the samples above, this repository's code and documents in 4 KB
    // pieces, and a seeded soup of the patterns' own tokens and punctuation.
    const corpus = samples.map(([, text]) => text);
    for (const dir of ['src', 'src/pastes', 'src/http', 'src/http/web', 'src/storage', 'test', 'docs', 'bench']) {
      for (const name of readdirSync(join(ROOT, dir))) {
        if (!/\.(ts|md|js|css)$/.test(name)) continue;
        const text = readFileSync(join(ROOT, dir, name), 'utf8');
        for (let at = 0; at < text.length; at += 4096) corpus.push(text.slice(at, at + 4096));
      }
    }
    // The words of the patterns themselves (not of the literal lists under test), bare and spaced.
    const words = FEATURES.flatMap(
      ([, pattern]) => pattern.source.replace(/\\[a-z]/g, ' ').match(/[A-Za-z_]{2,}(?: [A-Za-z_]{2,})*/g) ?? [],
    );
    const tokens = [
      ...new Set(words.flatMap((word) => [word, `${word} `, `${word}.`, `${word}(`])),
      ...'()[]{}<>:;=$#.-_!&|*\'"` \t\n\n'.split(''),
      ...['x', 'main', 'int', 'string', 'self', 'name', '12', 'then', 'end', 'in', 'do', 'a b'],
    ].filter(Boolean);
    for (const token of tokens) {
      corpus.push(
        `\n${token}\n`,
        `\n  ${token} main(x):\n`,
        `${token}x y = (z) {\n  ${token}\n}\n`,
        `[${token}](${token})`,
      );
    }
    let seed = 42;
    const random = () => {
      seed = (seed * 1103515245 + 12345) % 2147483648;
      return seed / 2147483648;
    };
    for (let i = 0; i < 3000; i++) {
      corpus.push(Array.from({ length: 40 }, () => tokens[Math.floor(random() * tokens.length)]).join(''));
    }
    // Stronger than needed: every match itself holds one of its pattern's literals.
    let matched = 0;
    for (const sample of corpus) {
      for (const [language, pattern, , literals] of FEATURES) {
        if (literals === null) continue;
        pattern.lastIndex = 0;
        for (let match = pattern.exec(sample); match !== null; match = pattern.exec(sample)) {
          if (match[0] === '') pattern.lastIndex++;
          matched++;
          assert.ok(
            literals.some((literal) => match[0].includes(literal)),
            `${language} ${pattern} matched ${JSON.stringify(match[0])} with none of ${JSON.stringify(literals)}`,
          );
        }
      }
    }
    assert.ok(matched > 5000, `only ${matched} matches: the corpus tests little`);
  });
});

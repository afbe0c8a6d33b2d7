/**
 * The HTML of the public pages. Every value that comes from a paste or a request passes through
 * escapeHtml; pages load only same-origin scripts and styles (the CSP forbids inline script).
 */
import { formatTimestamp } from '../../clock.js';
import type { Paste } from '../../pastes/paste.js';
import type { PasteSummary } from '../../storage/paste-repository.js';

const ESCAPES: Record<string, string> = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' };

/**
 * The separator between links and facts. The templates are ASCII throughout (entities for the
 * rest): a page whose bytes are all ASCII is decoded by a client's UTF-8 decoder on its fast path
 * (V8 takes 5 µs for a 48 KB page against 46 µs with one "·" in it), and written by the server
 * without re-encoding. test/quick-create-and-web.test.ts holds every page to it.
 */
const SEP = ' &middot; ';

export function escapeHtml(text: string): string {
  return text.replace(/[&<>"']/g, (c) => ESCAPES[c] as string);
}

function layout(title: string, body: string): string {
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="no-referrer">
<title>${escapeHtml(title)}${SEP}fastpaste</title>
<link rel="stylesheet" href="/static/style.css">
<link rel="icon" href="/favicon.ico" type="image/svg+xml">
</head>
<body>
<header><a class="brand" href="/">fastpaste</a> <a href="/archive">archive</a></header>
<main>
${body}
</main>
</body>
</html>
`;
}

export function errorPage(status: number, message: string): string {
  return layout(`Error ${status}`, `<h1>${status}</h1><p class="error">${escapeHtml(message)}</p>`);
}

/**
 * The home page: the form that creates a paste from the browser (POST /, web-routes.ts), when
 * anonymous creation is allowed, and the line that creates one from a terminal. create.js offers
 * "Encrypt in this browser" where the browser can (a secure page); without it the form posts the
 * text as it is.
 */
export function homePage(baseUrl: string, options: { canCreate: boolean; expiries: readonly string[] }): string {
  const expiry = options.expiries
    .map(
      (value) =>
        `<option value="${escapeHtml(value)}"${value === '1d' ? ' selected' : ''}>${escapeHtml(value)}</option>`,
    )
    .join('');
  const form = options.canCreate
    ? `<form id="create-form" method="post" action="/">
<p><label for="content">Text or code</label><br><textarea id="content" name="content" rows="16" required></textarea></p>
<p class="fields"><label>Title <input name="title" maxlength="200"></label>
<label>Language <input name="language" maxlength="40" placeholder="detected" autocomplete="off"></label>
<label>Expires after <select name="expiry">${expiry}</select></label></p>
<p class="fields"><label>Password <input type="password" name="password" autocomplete="new-password"></label>
<label><input type="checkbox" name="burn" value="true"> View once</label>
<label><input type="checkbox" name="public" value="true"> List in the archive</label>
<span id="e2e-option" hidden><label><input type="checkbox" id="encrypt"> Encrypt the text in this browser (the key stays in the link; the title and language are not encrypted)</label></span></p>
<p><button type="submit">Create paste</button> <span id="create-status" class="notice" role="status"></span></p>
</form>
<script src="/static/create.js"></script>`
    : '<p>Creating pastes here needs an API key: see the API.</p>';
  return layout(
    'Paste text and code',
    `<h1>fastpaste</h1>
${form}
<p>Paste from a terminal:</p>
<pre>echo 'hello world' | curl --data-binary @- ${escapeHtml(baseUrl)}/api/v1/cli</pre>
<p>More: <a href="/api/v1/cli">quick-create usage</a>${SEP}<a href="/archive">public archive</a></p>`,
  );
}

export interface ViewLinks {
  rawUrl: string;
  downloadUrl: string | null;
}

function meta(paste: Paste): string {
  const parts = [
    paste.language ? escapeHtml(paste.language) : 'plain text',
    `${paste.fileSize} bytes`,
    `created ${formatTimestamp(paste.createdAt)} UTC`,
    paste.expiresAt === null ? 'never expires' : `expires ${formatTimestamp(paste.expiresAt)} UTC`,
    `${paste.viewCount} view${paste.viewCount === 1 ? '' : 's'}`,
  ];
  return `<p class="meta">${parts.join(SEP)}</p>`;
}

/**
 * A paste's page. `highlighted` is HTML made by the highlighter (which escapes); without it the
 * content is escaped here. An encrypted paste is shown as ciphertext for view.js to decrypt
 * with the key from the address's fragment, which never reaches the server.
 */
/** Where the code goes in a paste's page: it is added as bytes, not put through the template. */
const CODE_MARK = '\u0000code\u0000';

/**
 * A page shows at most this many characters of a paste: escaping 4 MB on every view would hold
 * the server for a second each time (a quarter of one for 4 MB of "<", measured). The whole
 * paste is at /raw, or, behind a password, downloaded through the page's form.
 */
export const PAGE_TEXT_MAX = 256 * 1024;

/**
 * A paste's page in the parts it is written in: the template around the code as text, the
 * code as the highlighter's cached bytes. Written part by part (one writev), a 10 KB paste's
 * 50 KB page costs no new buffer of its size per request.
 */
export function pastePageParts(
  paste: Paste,
  links: ViewLinks,
  options: { burned: boolean; highlighted: Buffer | null },
): Array<string | Buffer> {
  // An empty title (the API takes one) shows the id, as none does.
  const title = paste.title || paste.id;
  const linkParts =
    paste.passwordHash === null && !options.burned ? [`<a href="${escapeHtml(links.rawUrl)}">raw</a>`] : [];
  if (links.downloadUrl && paste.passwordHash === null && !options.burned) {
    linkParts.push(`<a href="${escapeHtml(links.downloadUrl)}">download</a>`);
  }
  // A paste that can be had whole again is cut: at /raw, or, behind a password, through a form
  // that downloads it (each POST with the password would otherwise escape all of it again). A
  // view-once paste is shown in full: this is its one view.
  const protectedPaste = paste.passwordHash !== null && !options.burned;
  const cut =
    (linkParts.length > 0 || protectedPaste) &&
    !paste.encrypted &&
    options.highlighted === null &&
    paste.content.length > PAGE_TEXT_MAX;
  const shown = `This paste is ${paste.fileSize} bytes; this page shows its first ${PAGE_TEXT_MAX / 1024}K characters.`;
  const cutNotice = !cut
    ? ''
    : protectedPaste
      ? `<p class="notice">${shown}</p>
<form method="post" action="/view/${escapeHtml(encodeURIComponent(paste.id))}" class="download-whole">
<input type="hidden" name="confirm" value="1"><input type="hidden" name="download" value="1">
<label>Password <input type="password" name="password" autocomplete="current-password" required></label>
<button>Download it whole</button>
</form>`
      : `<p class="notice">${shown} The whole paste is at <a href="${escapeHtml(links.rawUrl)}">raw</a>.</p>`;
  const notice = `${
    options.burned
      ? '<p class="notice">This paste was view-once: it has now been deleted from the server. Copy it if you need it.</p>'
      : ''
  }${cutNotice}`;
  const description = paste.description ? `<p class="description">${escapeHtml(paste.description)}</p>` : '';
  const languageClass = paste.language ? ` class="hljs language-${escapeHtml(paste.language)}"` : '';
  const body = paste.encrypted
    ? `<div id="e2e" data-language="${escapeHtml(paste.language ?? '')}"${options.burned ? ' data-burned="true"' : ''}>
<p class="notice" id="e2e-status">This paste is encrypted end to end. Decrypting in your browser with the key from the link&hellip;</p>
<noscript><p class="notice">Decrypting it needs JavaScript, which this browser does not run here.${
        linkParts.length > 0 ? ` Its ciphertext is at <a href="${escapeHtml(links.rawUrl)}">raw</a>.` : ''
      }${
        // A burned paste has no /raw left: its ciphertext is shown, to decrypt elsewhere.
        options.burned
          ? ` Its ciphertext, deleted from the server, is below: copy it with the key to decrypt it elsewhere.</p><pre class="ciphertext">${escapeHtml(paste.content)}</pre>`
          : '</p>'
      }</noscript>
<form id="e2e-key-form" hidden><label>Key <input id="e2e-key" autocomplete="off"></label> <button>Decrypt</button></form>
<pre id="ciphertext" hidden>${escapeHtml(paste.content)}</pre>
<pre><code id="plaintext"></code></pre>
</div>
<script src="/static/view.js"></script>`
    : `<pre><code${languageClass}>${CODE_MARK}</code></pre>`;
  const html = layout(
    title,
    `<h1>${escapeHtml(title)}</h1>
${description}${meta(paste)}
<nav class="links">${linkParts.join(SEP)}</nav>
${notice}
${body}`,
  );
  if (paste.encrypted) return [html];
  // The highlighted code (kept encoded by the highlighter's cache) stays bytes: a page of 10 KB
  // of code is ~50 KB of HTML, which as one string would be measured and encoded again on every
  // request. Only the template follows the mark, so the last one is the real one.
  const at = html.lastIndexOf(CODE_MARK);
  const code = options.highlighted ?? escapeHtml(cut ? cutAt(paste.content, PAGE_TEXT_MAX) : paste.content);
  return [html.slice(0, at), code, html.slice(at + CODE_MARK.length)];
}

/**
 * The gate before content that must not be delivered by a mere GET (D11, D13): a view-once
 * paste asks for confirmation, a protected one for its password, always by POST. gate.js adds
 * the address's #fragment (an E2E paste's key) to the form's action as it is sent.
 */
export function gatePage(paste: Paste, options: { error?: string }): string {
  const needsPassword = paste.passwordHash !== null;
  const title = needsPassword ? 'Password required' : 'View once';
  const error = options.error ? `<p class="error">${escapeHtml(options.error)}</p>` : '';
  const burnNote = paste.burnAfterRead
    ? '<p>This paste can be viewed once. Showing it deletes it from the server for everyone.</p>'
    : '';
  const passwordField = needsPassword
    ? '<label>Password <input type="password" name="password" autocomplete="off" required autofocus></label>'
    : '';
  return layout(
    title,
    `<h1>${title}</h1>
${burnNote}${error}
<form id="gate-form" method="post" action="/view/${escapeHtml(paste.id)}">
<input type="hidden" name="confirm" value="1">
${passwordField}
<button type="submit">${paste.burnAfterRead ? 'Show and delete' : 'Show'}</button>
</form>
<script src="/static/gate.js"></script>`,
  );
}

export function archivePage(items: PasteSummary[], page: number, hasMore: boolean): string {
  const rows = items
    .map(
      (p) =>
        `<li><a href="/view/${escapeHtml(p.id)}"><bdi>${escapeHtml(p.title || p.id)}</bdi></a> <span class="meta">${escapeHtml(p.language ?? 'text')}${SEP}${formatTimestamp(p.createdAt)} UTC</span></li>`,
    )
    .join('\n');
  const nav = [
    page > 1 ? `<a href="/archive?page=${page - 1}">newer</a>` : '',
    hasMore ? `<a href="/archive?page=${page + 1}">older</a>` : '',
  ]
    .filter(Boolean)
    .join(SEP);
  return layout(
    'Public archive',
    `<h1>Public archive</h1>
${items.length === 0 ? '<p>No public pastes yet.</p>' : `<ol class="archive">\n${rows}\n</ol>`}
<nav>${nav}</nav>`,
  );
}

export function sitemapXml(baseUrl: string, items: PasteSummary[]): string {
  const escapeXml = escapeHtml;
  const urls = [
    `<url><loc>${escapeXml(baseUrl)}/</loc></url>`,
    `<url><loc>${escapeXml(baseUrl)}/archive</loc></url>`,
    ...items.map(
      (p) =>
        `<url><loc>${escapeXml(`${baseUrl}/view/${p.id}`)}</loc><lastmod>${new Date(p.createdAt).toISOString().slice(0, 10)}</lastmod></url>`,
    ),
  ];
  return `<?xml version="1.0" encoding="UTF-8"?>
<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">
${urls.join('\n')}
</urlset>
`;
}

/** The first `max` UTF-16 units of `text`, one fewer where the cut would split a surrogate pair. */
function cutAt(text: string, max: number): string {
  const last = text.charCodeAt(max - 1);
  return text.slice(0, last >= 0xd800 && last <= 0xdbff ? max - 1 : max);
}

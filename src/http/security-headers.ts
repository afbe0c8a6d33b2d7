/** Headers on every answer (pages, API, raw): no framing, no sniffing, no referrer, no inline script. */
export const SECURITY_HEADERS: Record<string, string> = {
  'content-security-policy':
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'",
  'referrer-policy': 'no-referrer',
  'x-content-type-options': 'nosniff',
  'x-frame-options': 'DENY',
  'cross-origin-opener-policy': 'same-origin',
};

/**
 * The Content-Security-Policy of a paste's content answered as text (/raw, /download, the API's
 * raw): nothing on it may load, and a browser that renders it as a document anyway (one that
 * ignores nosniff, or a type it takes for HTML) renders it sandboxed: an origin of its own, no
 * script, no forms, no plugins, as code hosts serve their users' raw files. Shorter than the
 * pages' policy too: a raw answer's headers are a third of its bytes at 1 KB.
 */
export const TEXT_CONTENT_SECURITY_POLICY = "default-src 'none'; frame-ancestors 'none'; sandbox";

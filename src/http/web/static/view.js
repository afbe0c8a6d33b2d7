// Decrypts an end-to-end encrypted paste in the browser. The key comes from the address's
// fragment (#key), which browsers never send to the server. Format: fpe1:<b64 iv>:<b64 ct+tag>,
// AES-256-GCM. The plaintext is only ever set as text, never as HTML; with a stored language it
// is then highlighted by /static/highlight.js (the server's highlight.js, its size cap and class
// names), whose output escapes the text.
(() => {
  const root = document.getElementById('e2e');
  if (!root) return;
  const status = document.getElementById('e2e-status');
  const form = document.getElementById('e2e-key-form');
  const keyInput = document.getElementById('e2e-key');
  const output = document.getElementById('plaintext');
  const wire = document.getElementById('ciphertext').textContent.trim();
  const language = root.dataset.language;
  // Just burned (view once): this page is the paste's last copy.
  const burned = root.dataset.burned === 'true';
  const LAST_COPY = ' It was deleted from the server: its ciphertext is below, to copy with the key and decrypt later.';

  /** A burned paste's ciphertext, shown when this page cannot decrypt it now. */
  function keepCiphertext() {
    if (!burned) return;
    status.textContent += LAST_COPY;
    document.getElementById('ciphertext').hidden = false;
  }

  // Browsers give Web Crypto only to secure pages (HTTPS, or localhost): served over plain HTTP
  // on another address, every key would be told it does not decrypt.
  // The ciphertext is shown then, to decrypt elsewhere: a view-once paste's page is its last copy.
  if (!window.isSecureContext || !window.crypto?.subtle) {
    status.textContent =
      'Decrypting needs a secure connection: this browser decrypts only on a page served over HTTPS (or from localhost). Its ciphertext is below: copy it with the key to decrypt it elsewhere.';
    document.getElementById('ciphertext').hidden = false;
    return;
  }

  const fromBase64 = (text) => Uint8Array.from(atob(text), (c) => c.charCodeAt(0));
  const fromBase64Url = (text) => {
    const b64 = text.replace(/-/g, '+').replace(/_/g, '/');
    return fromBase64(b64 + '='.repeat((4 - (b64.length % 4)) % 4));
  };

  /** A key that is not 32 bytes: cut short (a link copied in part) or not a key at all. */
  class WrongKeyLength extends Error {}

  async function decrypt(keyText) {
    const parts = wire.split(':');
    if (parts.length !== 3 || parts[0] !== 'fpe1') throw new Error('not an fpe1 paste');
    // AES-GCM with a 256-bit key alone (api-v1.md): a 128- or 192-bit key is not the format's.
    // Told by its length before decoding: some lengths cut short are not base64 at all.
    if (/^[A-Za-z0-9_-]*=*$/.test(keyText) && !/^[A-Za-z0-9_-]{43}=?$/.test(keyText)) throw new WrongKeyLength();
    const raw = fromBase64Url(keyText);
    // Standard base64 (+ and /) decodes too: its length is told once decoded.
    if (raw.length !== 32) throw new WrongKeyLength();
    const key = await crypto.subtle.importKey('raw', raw, 'AES-GCM', false, ['decrypt']);
    const plain = await crypto.subtle.decrypt({ name: 'AES-GCM', iv: fromBase64(parts[1]) }, key, fromBase64(parts[2]));
    // The BOM kept, as the server keeps a plain paste's: the text is what was encrypted.
    return new TextDecoder('utf-8', { ignoreBOM: true }).decode(plain);
  }

  let highlighter = null;
  /** highlight.js, loaded once and only for a paste with a language (script-src 'self'). */
  function loadHighlighter() {
    highlighter ??= new Promise((resolve, reject) => {
      const script = document.createElement('script');
      script.src = '/static/highlight.js';
      script.addEventListener('load', () => resolve(window.fastpasteHighlight));
      script.addEventListener('error', reject);
      document.head.append(script);
    });
    return highlighter;
  }

  /** Highlights the text shown, unless it is too long, its language unknown or the text changed. */
  async function highlight(text) {
    if (!language) return;
    try {
      const html = (await loadHighlighter())(text, language);
      if (html === null || output.textContent !== text) return;
      output.className = `hljs language-${language}`;
      output.innerHTML = html; // highlight.js's output: the text escaped, inside its spans
    } catch {
      // Shown plain.
    }
  }

  // readKey runs inside the try: a fragment that is not valid percent-encoding (#%E0%A4%A) makes
  // decodeURIComponent throw, which is a key that does not decrypt like any other.
  async function show(readKey) {
    try {
      const text = await decrypt(readKey());
      output.className = '';
      output.textContent = text;
      status.textContent = 'Decrypted in your browser.';
      form.hidden = true;
      document.getElementById('ciphertext').hidden = true;
      highlight(text);
    } catch (err) {
      status.textContent =
        err instanceof WrongKeyLength
          ? 'This key is not whole: a key is 43 characters (a 256-bit key). Check that the link was copied entire.'
          : 'This key does not decrypt the paste.';
      form.hidden = false;
      keepCiphertext();
    }
  }

  form.addEventListener('submit', (event) => {
    event.preventDefault();
    const typed = keyInput.value.trim();
    if (typed !== '') return show(() => typed);
    status.textContent = 'Enter the key to decrypt the paste.';
    keepCiphertext();
  });
  const fragment = location.hash.slice(1);
  if (fragment) show(() => decodeURIComponent(fragment));
  else {
    status.textContent = 'This paste is encrypted end to end. Enter its key to read it.';
    form.hidden = false;
    keepCiphertext();
  }
})();

// Decrypts an end-to-end encrypted paste in the browser. The key comes from the address's
// fragment (#key), which browsers never send to the server. Format: fpe1:<b64 iv>:<b64 ct+tag>,
// AES-256-GCM. The plaintext is only ever set as text, never as HTML.
(() => {
  const root = document.getElementById('e2e');
  if (!root) return;
  const status = document.getElementById('e2e-status');
  const form = document.getElementById('e2e-key-form');
  const keyInput = document.getElementById('e2e-key');
  const output = document.getElementById('plaintext');
  const wire = document.getElementById('ciphertext').textContent.trim();

  const fromBase64 = (text) => Uint8Array.from(atob(text), (c) => c.charCodeAt(0));
  const fromBase64Url = (text) => {
    const b64 = text.replace(/-/g, '+').replace(/_/g, '/');
    return fromBase64(b64 + '='.repeat((4 - (b64.length % 4)) % 4));
  };

  async function decrypt(keyText) {
    const parts = wire.split(':');
    if (parts.length !== 3 || parts[0] !== 'fpe1') throw new Error('not an fpe1 paste');
    const key = await crypto.subtle.importKey('raw', fromBase64Url(keyText), 'AES-GCM', false, ['decrypt']);
    const plain = await crypto.subtle.decrypt({ name: 'AES-GCM', iv: fromBase64(parts[1]) }, key, fromBase64(parts[2]));
    return new TextDecoder().decode(plain);
  }

  // readKey runs inside the try: a fragment that is not valid percent-encoding (#%E0%A4%A) makes
  // decodeURIComponent throw, which is a key that does not decrypt like any other.
  async function show(readKey) {
    try {
      output.textContent = await decrypt(readKey());
      status.textContent = 'Decrypted in your browser.';
      form.hidden = true;
    } catch {
      status.textContent = 'This key does not decrypt the paste.';
      form.hidden = false;
    }
  }

  form.addEventListener('submit', (event) => {
    event.preventDefault();
    show(() => keyInput.value.trim());
  });
  const fragment = location.hash.slice(1);
  if (fragment) show(() => decodeURIComponent(fragment));
  else {
    status.textContent = 'This paste is encrypted end to end. Enter its key to read it.';
    form.hidden = false;
  }
})();

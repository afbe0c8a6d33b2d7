// The home page's form. Without this script, or with "Encrypt in this browser" off, the form is
// posted as it is and the server answers with the new paste's page. With it on, the text is
// encrypted here before anything is sent (AES-256-GCM, fpe1:<b64 iv>:<b64 ct+tag>, the format
// of the API and of view.js), the ciphertext is posted, and the browser goes to the paste's page
// with the key in the address's #fragment, which browsers never send to the server.
(() => {
  const form = document.getElementById('create-form');
  if (!form) return;
  const option = document.getElementById('e2e-option');
  const encrypt = document.getElementById('encrypt');
  const status = document.getElementById('create-status');
  const button = form.querySelector('button[type="submit"]');

  // Browsers give Web Crypto to secure pages only (HTTPS, or localhost): elsewhere the option
  // stays hidden rather than fail.
  if (!window.isSecureContext || !window.crypto?.subtle) return;
  option.hidden = false;

  const toBase64 = (bytes) => {
    let text = '';
    for (let i = 0; i < bytes.length; i += 0x8000) text += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
    return btoa(text);
  };
  const toBase64Url = (bytes) => toBase64(bytes).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');

  // D6, which the server cannot check on ciphertext: at least 3 characters, not only white space.
  const tooShort = (text) => [...text].length < 3 || /^[\s\p{White_Space}]*$/u.test(text);

  let sending = false;
  form.addEventListener('submit', async (event) => {
    if (!encrypt.checked) return;
    event.preventDefault();
    if (sending) return;
    if (tooShort(form.elements.content.value)) {
      status.textContent = 'The content must be at least 3 characters and not only white space.';
      return;
    }
    sending = true;
    button.disabled = true;
    status.textContent = 'Encrypting in your browser…';
    try {
      const keyBytes = crypto.getRandomValues(new Uint8Array(32));
      const iv = crypto.getRandomValues(new Uint8Array(12));
      const key = await crypto.subtle.importKey('raw', keyBytes, 'AES-GCM', false, ['encrypt']);
      const plain = new TextEncoder().encode(form.elements.content.value);
      const sealed = new Uint8Array(await crypto.subtle.encrypt({ name: 'AES-GCM', iv }, key, plain));
      const body = new URLSearchParams(new FormData(form));
      body.set('content', `fpe1:${toBase64(iv)}:${toBase64(sealed)}`);
      body.set('encrypt', 'true');
      status.textContent = 'Sending the ciphertext…';
      const response = await fetch(form.action, { method: 'POST', headers: { accept: 'application/json' }, body });
      const answer = await response.json().catch(() => null);
      if (response.ok && answer && !answer.error) {
        // The page's own origin, not the server's BASE_URL: the browser is already where it is served.
        const page = new URL(`/view/${encodeURIComponent(answer.data.paste_id)}`, location.href);
        page.hash = toBase64Url(keyBytes);
        status.textContent = 'Created; opening it…';
        location.assign(page.href);
        return; // the button stays off: the form has done its work
      }
      const problems = (answer?.details ?? []).map((d) => `${d.field} ${d.message}`).join('; ');
      status.textContent = `${answer?.message ?? `The server answered ${response.status}.`}${problems ? ` (${problems})` : ''}`;
    } catch {
      status.textContent = 'The paste could not be encrypted or sent; nothing was stored. Try again.';
    }
    sending = false;
    button.disabled = false;
  });
})();

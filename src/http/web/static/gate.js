// The gate before a view-once or password-protected paste posts its form to /view/<id>. A form's
// action carries no #fragment, so the key of an end-to-end encrypted paste would be lost on the
// way to the page that decrypts it. The fragment is added to the action just before the form is
// sent: the browser keeps it in the address of the answer and never sends it to the server.
(() => {
  const form = document.getElementById('gate-form');
  if (!form) return;
  const action = form.getAttribute('action');
  // Sent once: a second submit (a double click) while the first answer is on its way would have
  // the browser drop that answer for the second's, and a view-once paste's one showing with it.
  let sent = false;
  form.addEventListener('submit', (event) => {
    if (sent) {
      event.preventDefault();
      return;
    }
    sent = true;
    // Free again after a while: a reader who stopped the page's loading (Esc) may send it again.
    setTimeout(() => {
      sent = false;
    }, 5000);
    form.setAttribute('action', action + location.hash);
  });
  // A page come back to from the history (the back button) may send its form again.
  window.addEventListener('pageshow', (event) => {
    if (event.persisted) sent = false;
  });
})();

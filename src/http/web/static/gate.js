// The gate before a view-once or password-protected paste posts its form to /view/<id>. A form's
// action carries no #fragment, so the key of an end-to-end encrypted paste would be lost on the
// way to the page that decrypts it. The fragment is added to the action just before the form is
// sent: the browser keeps it in the address of the answer and never sends it to the server.
(() => {
  const form = document.getElementById('gate-form');
  if (!form) return;
  const action = form.getAttribute('action');
  form.addEventListener('submit', () => {
    form.setAttribute('action', action + location.hash);
  });
})();

// Swagger UI for /docs: a file, not an inline script, so the page runs under the app's CSP (script-src 'self').
window.addEventListener("load", () => {
  window.ui = SwaggerUIBundle({
    url: "/openapi.json",
    dom_id: "#swagger-ui",
    deepLinking: true,
    validatorUrl: null, // never the public validator: nothing leaves this origin
    presets: [SwaggerUIBundle.presets.apis],
    layout: "BaseLayout",
  });
});

"""Response schemas (`*Public`): what each route returns, typed for `/openapi.json`."""

// Placeholder translation unit for a module whose sources are all headers.

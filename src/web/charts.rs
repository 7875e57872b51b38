//! SVG charts drawn on the server.

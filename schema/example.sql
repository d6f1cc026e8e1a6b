-- The example application schema. mcpsubd applies the --schema file once,
-- to a database that has no application tables yet. It is written for both
-- stores: the table names are quoted so that PostgreSQL keeps their case
-- (it folds unquoted names to lower case; in psql write "Product").

CREATE TABLE "Product" (
  sku         TEXT PRIMARY KEY,
  name        TEXT NOT NULL,
  price_cents INTEGER NOT NULL DEFAULT 0,
  category    TEXT,
  in_stock    INTEGER NOT NULL DEFAULT 1
);

CREATE TABLE "StockEvent" (
  id        INTEGER PRIMARY KEY,
  sku       TEXT NOT NULL,
  delta     INTEGER NOT NULL,
  note      TEXT
);

INSERT INTO "Product" (sku, name, price_cents, category, in_stock) VALUES
  ('A-100', 'Anvil', 4999, 'tools', 1),
  ('B-200', 'Bucket', 899, 'garden', 1),
  ('C-300', 'Chisel', 1299, 'tools', 0),
  ('D-400', 'Dust pan', 450, 'home', 1);

INSERT INTO "StockEvent" (id, sku, delta, note) VALUES
  (1, 'A-100', 10, 'initial stock'),
  (2, 'B-200', 25, 'initial stock'),
  (3, 'D-400', 5, 'initial stock');

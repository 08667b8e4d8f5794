# Evaluates flake.nix's outputs against stub inputs and checks their shape, for machines that
# cannot fetch nixpkgs (nix-instantiate --eval --strict nix/eval-outputs.nix). It proves the
# flake's attribute paths, references and toolchain pin are consistent; it does not build.
let
  flake = import ../flake.nix;
  nixpkgsStub = { outPath = ./stub-nixpkgs; lib = import ./stub-nixpkgs/lib.nix; };
  overlay = import ./stub-rust-overlay.nix;
  self = outputs // { outPath = ../.; };
  outputs = flake.outputs { inherit self; nixpkgs = nixpkgsStub; rust-overlay = overlay; };
  sys = "x86_64-linux";
  pkg = outputs.packages.${sys}.default;
  image = outputs.packages.${sys}.image;
  shell = outputs.devShells.${sys}.default;
  toolchainPin = (builtins.fromTOML (builtins.readFile ../rust-toolchain.toml)).toolchain.channel;
  lock = builtins.fromJSON (builtins.readFile ../flake.lock);
  check = cond: msg: if cond then true else throw "flake check failed: ${msg}";
in
assert check (builtins.sort builtins.lessThan (builtins.attrNames flake.inputs) == [ "nixpkgs" "rust-overlay" ]) "inputs";
assert check (builtins.attrNames lock.nodes.root.inputs == [ "nixpkgs" "rust-overlay" ]) "lock inputs match flake inputs";
assert check (lock.nodes.rust-overlay.inputs.nixpkgs == [ "nixpkgs" ]) "rust-overlay follows nixpkgs in the lock";
assert check (builtins.stringLength lock.nodes.nixpkgs.locked.rev == 40) "nixpkgs rev is a full commit";
assert check (pkg.toolchain.channel == toolchainPin) "package built with rust-toolchain.toml's ${toolchainPin}";
assert check (pkg.cargoLock.lockFile == ../Cargo.lock) "Cargo.lock pins the crates";
assert check (builtins.elem "--bins" pkg.cargoBuildFlags) "all binaries built";
assert check (image.imageArgs.name == "echolab" && image.imageArgs.tag == "nix") "image is echolab:nix (echolab-up --image echolab:nix)";
assert check (builtins.elem pkg image.imageArgs.contents) "image contains the binaries";
assert check (builtins.any (p: (p.name or "") == "rust-${toolchainPin}") shell.shellArgs.packages) "dev shell has the pinned toolchain";
assert check (builtins.all (n: builtins.any (p: (p.name or "") == n) shell.shellArgs.packages)
  [ "cargo-nextest" "iproute2" "strace" "docker-client" ]) "dev shell tools";
assert check (outputs.apps.${sys}.default.program == "${pkg}/bin/echolab-up") "nix run starts echolab-up";
assert check (outputs.checks.${sys}.unit.doCheck) "checks.unit runs tests";
{
  systems = builtins.attrNames outputs.packages;
  packages = builtins.attrNames outputs.packages.${sys};
  apps = builtins.attrNames outputs.apps.${sys};
  checks = builtins.attrNames outputs.checks.${sys};
  toolchain = pkg.toolchain.channel;
  nixpkgs = lock.nodes.nixpkgs.locked.rev;
}

{
  description = "echolab: server I/O-model experiments (select, poll, epoll LT/ET, io_uring, ...) run in containers under named, verified network conditions";

  # Pinned in flake.lock: nixpkgs (nixos-unstable) and rust-overlay, which provides the exact
  # toolchain of rust-toolchain.toml so that `nix develop` and rustup users build with the same
  # compiler.
  inputs = {
    nixpkgs.url = "github:NixOS/nixpkgs/nixos-unstable";
    rust-overlay = {
      url = "github:oxalica/rust-overlay";
      inputs.nixpkgs.follows = "nixpkgs";
    };
  };

  outputs = { self, nixpkgs, rust-overlay }:
    let
      lib = nixpkgs.lib;
      # Linux only: the I/O models use epoll, io_uring and Linux socket options.
      systems = [ "x86_64-linux" "aarch64-linux" ];
      forAllSystems = f: lib.genAttrs systems (system: f system (import nixpkgs {
        inherit system;
        overlays = [ rust-overlay.overlays.default ];
      }));

      workspaceVersion = (builtins.fromTOML (builtins.readFile ./Cargo.toml)).workspace.package.version;

      # Only what the build reads, so that editing the README does not rebuild the binaries.
      src = lib.fileset.toSource {
        root = ./.;
        fileset = lib.fileset.unions [
          ./Cargo.toml
          ./Cargo.lock
          ./rust-toolchain.toml
          ./crates
          ./netem
          ./experiments
        ];
      };

      toolchainFor = pkgs: pkgs.rust-bin.fromRustupToolchainFile ./rust-toolchain.toml;

      echolabFor = pkgs:
        let
          toolchain = toolchainFor pkgs;
          rustPlatform = pkgs.makeRustPlatform { cargo = toolchain; rustc = toolchain; };
        in
        rustPlatform.buildRustPackage {
          pname = "echolab";
          version = workspaceVersion;
          inherit src;
          cargoLock.lockFile = ./Cargo.lock;
          cargoBuildFlags = [ "--workspace" "--bins" ];
          # Most tests need root, network namespaces, rlimits or a Docker engine, none of which
          # the build sandbox has; `checks.unit` runs the ones that need none of them.
          doCheck = false;
          meta = {
            description = "echo-server, echo-bench, echolab-netem, echolab-up, echolab-report";
            license = with lib.licenses; [ mit asl20 ];
            platforms = lib.platforms.linux;
            mainProgram = "echolab-up";
          };
        };
    in
    {
      packages = forAllSystems (system: pkgs:
        let echolab = echolabFor pkgs; in {
          default = echolab;
          inherit echolab;
          # The lab image: the binaries plus iproute2 (manual poking), strace (exp34's
          # cross-check) and busybox (a small shell). Load it with
          #   docker load < result && echolab-up --image echolab:nix
          image = pkgs.dockerTools.buildLayeredImage {
            name = "echolab";
            tag = "nix";
            contents = [ echolab pkgs.iproute2 pkgs.strace pkgs.busybox ];
            config = {
              Env = [ "PATH=/bin" ];
              Cmd = [ "/bin/sh" ];
              Labels = { "org.opencontainers.image.title" = "echolab"; };
            };
          };
        });

      apps = forAllSystems (system: pkgs:
        let
          app = name: {
            type = "app";
            program = "${self.packages.${system}.default}/bin/${name}";
          };
        in {
          default = app "echolab-up";
          echolab-up = app "echolab-up";
          echolab-report = app "echolab-report";
        });

      devShells = forAllSystems (system: pkgs: {
        default = pkgs.mkShell {
          packages = [
            (toolchainFor pkgs)
            pkgs.cargo-nextest
            pkgs.iproute2
            pkgs.strace
            pkgs.docker-client
            pkgs.docker-compose
          ];
          shellHook = ''
            echo "echolab dev shell: $(rustc --version); build with 'cargo build --release', test with 'cargo nextest run --workspace' (as root)"
          '';
        };
      });

      checks = forAllSystems (system: pkgs: {
        # Unit tests (units, contracts, encodings, planning, statistics): they need no root,
        # namespaces or Docker, so they run in the build sandbox.
        unit = (echolabFor pkgs).overrideAttrs (old: {
          pname = "echolab-unit-tests";
          doCheck = true;
          checkPhase = ''
            runHook preCheck
            cargo test --workspace --lib --offline --release
            runHook postCheck
          '';
        });
        # Everything builds, with the pinned toolchain.
        build = self.packages.${system}.default;
      });

      formatter = forAllSystems (system: pkgs: pkgs.nixpkgs-fmt);
    };
}

# Builds bulkwire with cargo and installs it like a system library:
#
#   make                               cargo build --release of the library and the tools
#   make install PREFIX=$HOME/.local   build, then install under PREFIX (default /usr/local)
#   make install-files PREFIX=...      install what is built already, without building
#   make uninstall PREFIX=...
#
# What goes where (DESTDIR is prepended to every path, for packaging):
#   $(BINDIR)       bspcc bspcxx bwmpicc bwmpicxx bsprun bwbench
#   $(LIBDIR)       libbulkwire.a, libbulkwire.so.VERSION with its SONAME link
#                   libbulkwire.so.ABI and the development link libbulkwire.so
#   $(INCLUDEDIR)   bsp.h mcbsp.h mcbsp-affinity.h mcbsp-profiling.h mcbsp-resiliency.h
#                   bulkwire.h bsp.hpp
#   $(INCLUDEDIR)/bulkwire-mpi   mpi.h (apart, so that it never shadows another MPI's)
#   $(LIBDIR)/pkgconfig          bulkwire.pc (shared), bulkwire-static.pc (static),
#                                bulkwire-mpi.pc (MPI programs, shared)
#   $(LIBDIR)/cmake/bulkwire     bulkwireConfig.cmake (find_package(bulkwire))
#   $(MPIDIR)/bin                the names build systems look for an MPI by: mpicc, mpicxx,
#                                mpic++ (links to bwmpicc, bwmpicxx), mpirun and mpiexec
#                                (links to bsprun). With it first in PATH, CC=mpicc
#                                ./configure and CMake's find_package(MPI) find bulkwire's MPI
#                                (or with cmake -DMPI_HOME=$(MPIDIR)).
#   $(MPIDIR)/pkgconfig          mpi.pc, mpi-c.pc, mpi-cxx.pc: Debian's MPI names, for builds
#                                that ask pkg-config for them (opt in with PKG_CONFIG_PATH)
#
# PROFILE picks the cargo profile (release; `test` builds into target/debug).
# STRIP removes from the installed libbulkwire.a what no C linker reads: the debug
# information (of Rust's standard library: cargo strips what it links, the programs and
# the shared library, but not a static library) and the LLVM bitcode kept for Rust's LTO
# (.llvmbc, .llvmcmd), 66 MB of a 69 MB release archive. The symbols stay, so perf names
# functions. The shared library loses its debug information too (a release build has
# none; PROFILE=test's has). `make install STRIP=true` installs both as cargo built them.

PREFIX ?= /usr/local
BINDIR ?= $(PREFIX)/bin
LIBDIR ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
MPIDIR ?= $(LIBDIR)/bulkwire/mpi
DESTDIR ?=
CARGO ?= cargo
PROFILE ?= release
STRIP ?= strip
TARGET_DIR ?= $(or $(CARGO_TARGET_DIR),target)
# Where cargo puts PROFILE's output.
BUILDDIR ?= $(TARGET_DIR)/$(if $(filter dev test,$(PROFILE)),debug,$(PROFILE))

VERSION := $(shell sed -n '/^\[workspace.package\]/,/^\[/s/^version *= *"\(.*\)"/\1/p' Cargo.toml)
MAJOR := $(word 1,$(subst ., ,$(VERSION)))
MINOR := $(word 2,$(subst ., ,$(VERSION)))
# The SONAME's version (crates/capi/build.rs): the major, or 0.MINOR before 1.0.
ABI := $(if $(filter 0,$(MAJOR)),0.$(MINOR),$(MAJOR))
# What the static library needs from the system (rustc --print native-static-libs).
SYSTEM_LIBS := -lgcc_s -lutil -lrt -lpthread -lm -ldl

TOOLS := bspcc bspcxx bwmpicc bwmpicxx bwmpifort bsprun bwbench
HEADERS := bsp.h mcbsp.h mcbsp-affinity.h mcbsp-profiling.h mcbsp-resiliency.h bulkwire.h \
	bsp.hpp
# MPI's headers (mpi.h, mpif.h) and the mpi module's source, from the MPI crate (none in a
# tree whose MPI layer has no header yet).
MPI_HEADERS := $(notdir $(wildcard crates/mpi/include/*.h crates/mpi/include/*.f90))
# The MPI names: wrapper links, by the tool each runs.
MPI_LINKS := mpicc:bwmpicc mpicxx:bwmpicxx mpic++:bwmpicxx mpifort:bwmpifort mpif90:bwmpifort \
  mpif77:bwmpifort mpirun:bsprun mpiexec:bsprun
MPI_PC := mpi mpi-c mpi-cxx

.PHONY: all build install install-files uninstall

all: build

build:
	$(CARGO) build --profile $(PROFILE) -p bulkwire-capi -p bulkwire-tools

install: build
	$(MAKE) install-files

# Templates: the installed paths replace @PREFIX@, @LIBDIR@, @INCLUDEDIR@, @VERSION@,
# @ABI@, @SYSTEM_LIBS@ and @CMAKE_SYSTEM_LIBS@.
SUBST = sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@LIBDIR@|$(LIBDIR)|g' \
	-e 's|@INCLUDEDIR@|$(INCLUDEDIR)|g' -e 's|@VERSION@|$(VERSION)|g' -e 's|@ABI@|$(ABI)|g' \
	-e 's|@SYSTEM_LIBS@|$(SYSTEM_LIBS)|g' \
	-e 's|@CMAKE_SYSTEM_LIBS@|$(subst $() ,;,$(patsubst -l%,%,$(SYSTEM_LIBS)))|g'

install-files:
	@test -n "$(VERSION)" || { echo "no version in Cargo.toml" >&2; exit 1; }
	@for f in $(TOOLS:%=$(BUILDDIR)/%) $(BUILDDIR)/libbulkwire.a $(BUILDDIR)/libbulkwire.so; do \
	  test -f "$$f" || { echo "$$f is missing: run make (or make build PROFILE=$(PROFILE))" >&2; exit 1; }; \
	done
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(LIBDIR)/pkgconfig \
	  $(DESTDIR)$(LIBDIR)/cmake/bulkwire $(DESTDIR)$(INCLUDEDIR) \
	  $(DESTDIR)$(INCLUDEDIR)/bulkwire-mpi $(DESTDIR)$(MPIDIR)/bin $(DESTDIR)$(MPIDIR)/pkgconfig
	install -m 755 $(TOOLS:%=$(BUILDDIR)/%) $(DESTDIR)$(BINDIR)/
	install -m 644 $(BUILDDIR)/libbulkwire.a $(DESTDIR)$(LIBDIR)/
	$(STRIP) --strip-debug -R .llvmbc -R .llvmcmd $(DESTDIR)$(LIBDIR)/libbulkwire.a
	install -m 755 $(BUILDDIR)/libbulkwire.so $(DESTDIR)$(LIBDIR)/libbulkwire.so.$(VERSION)
	$(STRIP) --strip-debug $(DESTDIR)$(LIBDIR)/libbulkwire.so.$(VERSION)
	ln -sf libbulkwire.so.$(VERSION) $(DESTDIR)$(LIBDIR)/libbulkwire.so.$(ABI)
	ln -sf libbulkwire.so.$(ABI) $(DESTDIR)$(LIBDIR)/libbulkwire.so
	install -m 644 $(HEADERS:%=crates/capi/include/%) $(DESTDIR)$(INCLUDEDIR)/
	$(if $(MPI_HEADERS),install -m 644 $(MPI_HEADERS:%=crates/mpi/include/%) \
	  $(DESTDIR)$(INCLUDEDIR)/bulkwire-mpi/)
	@# Absolute links: the wrappers find the headers and the library beside their real path.
	for l in $(MPI_LINKS); do \
	  ln -sf $(BINDIR)/$${l#*:} $(DESTDIR)$(MPIDIR)/bin/$${l%%:*} || exit 1; \
	done
	$(SUBST) install/bulkwire-mpi.pc.in > $(DESTDIR)$(LIBDIR)/pkgconfig/bulkwire-mpi.pc
	for n in $(MPI_PC); do \
	  $(SUBST) -e "s|^Name: .*|Name: $$n|" install/bulkwire-mpi.pc.in \
	    > $(DESTDIR)$(MPIDIR)/pkgconfig/$$n.pc || exit 1; \
	done
	$(SUBST) install/bulkwire.pc.in > $(DESTDIR)$(LIBDIR)/pkgconfig/bulkwire.pc
	$(SUBST) install/bulkwire-static.pc.in > $(DESTDIR)$(LIBDIR)/pkgconfig/bulkwire-static.pc
	$(SUBST) install/bulkwireConfig.cmake.in > $(DESTDIR)$(LIBDIR)/cmake/bulkwire/bulkwireConfig.cmake
	$(SUBST) install/bulkwireConfigVersion.cmake.in \
	  > $(DESTDIR)$(LIBDIR)/cmake/bulkwire/bulkwireConfigVersion.cmake

uninstall:
	rm -f $(TOOLS:%=$(DESTDIR)$(BINDIR)/%) $(HEADERS:%=$(DESTDIR)$(INCLUDEDIR)/%)
	rm -f $(DESTDIR)$(LIBDIR)/libbulkwire.a $(DESTDIR)$(LIBDIR)/libbulkwire.so \
	  $(DESTDIR)$(LIBDIR)/libbulkwire.so.$(ABI) $(DESTDIR)$(LIBDIR)/libbulkwire.so.$(VERSION)
	rm -f $(DESTDIR)$(LIBDIR)/pkgconfig/bulkwire.pc $(DESTDIR)$(LIBDIR)/pkgconfig/bulkwire-static.pc \
	  $(DESTDIR)$(LIBDIR)/pkgconfig/bulkwire-mpi.pc
	rm -rf $(DESTDIR)$(LIBDIR)/cmake/bulkwire $(DESTDIR)$(INCLUDEDIR)/bulkwire-mpi $(DESTDIR)$(MPIDIR)
	-rmdir $(DESTDIR)$(LIBDIR)/bulkwire 2>/dev/null

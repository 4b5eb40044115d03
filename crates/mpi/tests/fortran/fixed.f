! Fixed form with include 'mpif.h': a ring of DOUBLE PRECISION values
! and MPI_Sendrecv_replace. Prints "fixed OK rank=r".
      PROGRAM FIXED
      IMPLICIT NONE
      INCLUDE 'mpif.h'
      INTEGER IERR, RANK, NP, NEXT, PREV, I, ISTAT(MPI_STATUS_SIZE)
      DOUBLE PRECISION A(100), B(100)
      INTEGER K
      CALL MPI_INIT(IERR)
      CALL MPI_COMM_RANK(MPI_COMM_WORLD, RANK, IERR)
      CALL MPI_COMM_SIZE(MPI_COMM_WORLD, NP, IERR)
      NEXT = MOD(RANK + 1, NP)
      PREV = MOD(RANK + NP - 1, NP)
      DO 10 I = 1, 100
         A(I) = RANK + I * 0.5D0
   10 CONTINUE
      CALL MPI_SENDRECV(A, 100, MPI_DOUBLE_PRECISION, NEXT, 1,
     &                  B, 100, MPI_DOUBLE_PRECISION, PREV, 1,
     &                  MPI_COMM_WORLD, ISTAT, IERR)
      IF (ISTAT(MPI_SOURCE) .NE. PREV) CALL FAIL(RANK, 'SOURCE')
      DO 20 I = 1, 100
         IF (B(I) .NE. PREV + I * 0.5D0) CALL FAIL(RANK, 'DATA')
   20 CONTINUE
      K = RANK
      CALL MPI_SENDRECV_REPLACE(K, 1, MPI_INTEGER, NEXT, 2, PREV, 2,
     &                          MPI_COMM_WORLD, MPI_STATUS_IGNORE, IERR)
      IF (K .NE. PREV) CALL FAIL(RANK, 'REPLACE')
      PRINT '(A,I0)', 'fixed OK rank=', RANK
      CALL MPI_FINALIZE(IERR)
      END

      SUBROUTINE FAIL(RANK, WHAT)
      INCLUDE 'mpif.h'
      INTEGER RANK, IERR
      CHARACTER*(*) WHAT
      PRINT '(A,I0,2A)', 'fixed FAILED rank=', RANK, ': ', WHAT
      CALL MPI_ABORT(MPI_COMM_WORLD, 1, IERR)
      END

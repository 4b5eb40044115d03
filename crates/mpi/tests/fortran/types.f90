! Derived datatypes from Fortran: a column of a matrix (MPI_Type_vector over Fortran's
! column-major order: a row is strided), a struct built with MPI_Get_address and
! MPI_Type_create_struct (INTEGER(MPI_ADDRESS_KIND) displacements, an array of type
! handles), MPI_Type_size / MPI_Type_get_extent, MPI_BOTTOM as the buffer of absolute
! addresses, and MPI_Pack / MPI_Unpack. Every rank prints "types OK rank=r".
program types
    use mpi
    implicit none
    integer, parameter :: n = 5
    integer :: ierr, rank, np, next, prev, i, j
    integer :: rowtype, structtype, sz, pos
    integer(kind=MPI_ADDRESS_KIND) :: lb, extent, base, addrs(2), disps(2)
    integer :: blocklens(2), typelist(2)
    double precision :: a(n, n), b(n, n)
    ! Read and written through absolute addresses, where the compiler cannot see it.
    integer, volatile :: ivals(3), ivals_in(3)
    double precision, volatile :: dval, dval_in
    character(len=64) :: packbuf
    integer :: status(MPI_STATUS_SIZE)

    call MPI_Init(ierr)
    call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
    call MPI_Comm_size(MPI_COMM_WORLD, np, ierr)
    next = mod(rank + 1, np)
    prev = mod(rank + np - 1, np)

    ! Row 2 of a(n, n): n elements, stride n.
    call MPI_Type_vector(n, 1, n, MPI_DOUBLE_PRECISION, rowtype, ierr)
    call MPI_Type_commit(rowtype, ierr)
    call MPI_Type_size(rowtype, sz, ierr)
    call check(sz == 8 * n, 'vector size')
    call MPI_Type_get_extent(rowtype, lb, extent, ierr)
    call check(lb == 0 .and. extent == 8 * ((n - 1) * n + 1), 'vector extent')
    do j = 1, n
        do i = 1, n
            a(i, j) = rank * 1000 + i * 10 + j
        end do
    end do
    b = -1d0
    call MPI_Sendrecv(a(2, 1), 1, rowtype, next, 1, b(4, 1), 1, rowtype, prev, 1, &
                      MPI_COMM_WORLD, status, ierr)
    call MPI_Get_count(status, rowtype, i, ierr)
    call check(i == 1, 'get_count of the vector')
    call MPI_Get_elements(status, rowtype, i, ierr)
    call check(i == n, 'get_elements of the vector')
    do j = 1, n
        call check(b(4, j) == prev * 1000 + 20 + j, 'row received')
        call check(b(3, j) == -1d0 .and. b(5, j) == -1d0, 'other rows untouched')
    end do
    call MPI_Type_free(rowtype, ierr)
    call check(rowtype == MPI_DATATYPE_NULL, 'type_free')

    ! A struct of three INTEGERs and a DOUBLE PRECISION at absolute addresses.
    ivals = (/ rank, 2 * rank, 3 * rank /)
    dval = 0.25d0 * rank
    call MPI_Get_address(ivals, addrs(1), ierr)
    call MPI_Get_address(dval, addrs(2), ierr)
    blocklens = (/ 3, 1 /)
    typelist = (/ MPI_INTEGER, MPI_DOUBLE_PRECISION /)
    call MPI_Type_create_struct(2, blocklens, addrs, typelist, structtype, ierr)
    call MPI_Type_commit(structtype, ierr)
    call MPI_Type_size(structtype, sz, ierr)
    call check(sz == 3 * 4 + 8, 'struct size')
    ! Received into other variables through a second struct, relative to ivals_in.
    call MPI_Get_address(ivals_in, base, ierr)
    call MPI_Get_address(dval_in, disps(2), ierr)
    disps(1) = 0
    disps(2) = disps(2) - base
    ivals_in = -1
    dval_in = -1d0
    call MPI_Isend(MPI_BOTTOM, 1, structtype, next, 2, MPI_COMM_WORLD, i, ierr)
    call recv_struct(ivals_in, disps, blocklens, typelist)
    call MPI_Wait(i, MPI_STATUS_IGNORE, ierr)
    call check(all(ivals_in == (/ prev, 2 * prev, 3 * prev /)) .and. dval_in == 0.25d0 * prev, &
               'struct at MPI_BOTTOM')
    call MPI_Type_free(structtype, ierr)

    ! Pack an INTEGER and a DOUBLE PRECISION, send the bytes, unpack.
    pos = 0
    call MPI_Pack(rank + 7, 1, MPI_INTEGER, packbuf, len(packbuf), pos, MPI_COMM_WORLD, ierr)
    call MPI_Pack(1.5d0 * rank, 1, MPI_DOUBLE_PRECISION, packbuf, len(packbuf), pos, &
                  MPI_COMM_WORLD, ierr)
    call check(pos == 12, 'pack position')
    call MPI_Sendrecv_replace(packbuf, pos, MPI_PACKED, next, 3, prev, 3, MPI_COMM_WORLD, &
                              MPI_STATUS_IGNORE, ierr)
    pos = 0
    call MPI_Unpack(packbuf, 12, pos, i, 1, MPI_INTEGER, MPI_COMM_WORLD, ierr)
    call MPI_Unpack(packbuf, 12, pos, dval_in, 1, MPI_DOUBLE_PRECISION, MPI_COMM_WORLD, ierr)
    call check(i == prev + 7 .and. dval_in == 1.5d0 * prev, 'pack/unpack')

    print '(a,i0)', 'types OK rank=', rank
    call MPI_Finalize(ierr)

contains

    subroutine recv_struct(buf, d, bl, tl)
        integer, intent(inout) :: buf(3)
        integer(kind=MPI_ADDRESS_KIND), intent(in) :: d(2)
        integer, intent(in) :: bl(2), tl(2)
        integer :: t, e
        call MPI_Type_create_struct(2, bl, d, tl, t, e)
        call MPI_Type_commit(t, e)
        call MPI_Recv(buf, 1, t, prev, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE, e)
        call MPI_Type_free(t, e)
    end subroutine recv_struct

    subroutine check(ok, what)
        logical, intent(in) :: ok
        character(len=*), intent(in) :: what
        integer :: e
        if (.not. ok) then
            print '(a,i0,2a)', 'types FAILED rank=', rank, ': ', what
            call MPI_Abort(MPI_COMM_WORLD, 1, e)
        end if
    end subroutine check

end program types

"""KernelBench level 1, all 100 problems (ScalingIntelligence/KernelBench, ``KernelBench/level1/``),
each mapped to the tilegen spec that computes it or to the reason it has none yet.

:data:`SUITE` holds each problem as the suite writes it: number, file name, ``Model.forward``'s
torch expression (with the modules it calls and ``get_init_inputs()``), ``get_inputs()``'s
shapes (a number for a scalar input) and dtypes. :data:`RUNS` says how a spec runs a problem: the
kernel (``generated/<kernel>.py``), the problem's expression as a torch function, how to make its
inputs at the suite's sizes (and the module's parameters: a norm's ``weight`` 1 and ``bias`` 0 as
``nn.Module`` starts them; a convolution's weight, and problem 50's bias, uniform in +-1 /
sqrt(fan_in) as ``nn.Conv*d`` draws them, from a generator seeded with 0, the same tensors passed
to the problem's expression and to the kernel) and how the kernel's launcher is called with them
(views only: a transpose, a reshape of a contiguous tensor, ``unsqueeze``); :data:`NOT_YET` would
give the reason for any other problem (every problem has its spec now).
``benchmarks/kernelbench_l1.py`` times every problem of :data:`RUNS` on the GPU;
``tests/test_kernelbench_problems.py`` runs each in Triton's interpreter at small sizes.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

#: A tensor of a shape on a device: ``torch.rand`` (the suite's draw) or ``torch.randn`` (the
#: tests', both signs).
Draw = Callable[[tuple[int, ...], str], torch.Tensor]

#: (number, file name, Model.forward, get_inputs shapes, dtypes), as the suite has them.
SUITE: tuple[tuple[int, str, str, tuple, str], ...] = (
    (1, '1_Square_matrix_multiplication_',
     'torch.matmul(A, B)',
     ((4096, 4096), (4096, 4096)), 'float32'),
    (2, '2_Standard_matrix_multiplication_',
     'torch.matmul(A, B)',
     ((2048, 8192), (8192, 4096)), 'float32'),
    (3, '3_Batched_matrix_multiplication',
     'torch.bmm(A, B)',
     ((128, 512, 1024), (128, 1024, 2048)), 'float32'),
    (4, '4_Matrix_vector_multiplication_',
     'torch.matmul(A, B)',
     ((2048, 1048576), (1048576, 1)), 'float32'),
    (5, '5_Matrix_scalar_multiplication',
     'A * s',
     ((65536, 16384), 3.14), 'float32'),
    (6, '6_Matmul_with_large_K_dimension_',
     'torch.matmul(A, B)',
     ((256, 524288), (524288, 256)), 'float32'),
    (7, '7_Matmul_with_small_K_dimension_',
     'torch.matmul(A, B)',
     ((32768, 64), (64, 32768)), 'float32'),
    (8, '8_Matmul_with_irregular_shapes_',
     'torch.matmul(A, B)',
     ((8205, 2949), (2949, 5921)), 'float32'),
    (9, '9_Tall_skinny_matrix_multiplication_',
     'torch.matmul(A, B)',
     ((32768, 32), (32, 32768)), 'float32'),
    (10, '10_3D_tensor_matrix_multiplication',
     'torch.matmul(A, B)',
     ((16, 1024, 2048), (2048, 768)), 'float32'),
    (11, '11_4D_tensor_matrix_multiplication',
     "torch.einsum('bijl,lk->bijk', A, B)",
     ((8, 256, 512, 256), (256, 768)), 'float32'),
    (12, '12_Matmul_with_diagonal_matrices_',
     'A.unsqueeze(1) * B',
     ((4096,), (4096, 4096)), 'float32'),
    (13, '13_Matmul_for_symmetric_matrices',
     'torch.matmul(A, B)',
     ((4096, 4096), (4096, 4096)), 'float32'),
    (14, '14_Matmul_for_upper_triangular_matrices',
     'torch.triu(torch.matmul(A, B))',
     ((4096, 4096), (4096, 4096)), 'float32'),
    (15, '15_Matmul_for_lower_triangular_matrices',
     'torch.tril(torch.matmul(A, B))',
     ((4096, 4096), (4096, 4096)), 'float32'),
    (16, '16_Matmul_with_transposed_A',
     'torch.matmul(A.T, B)',
     ((8192, 2048), (8192, 4096)), 'float32'),
    (17, '17_Matmul_with_transposed_B',
     'torch.matmul(A, B.T)',
     ((2048, 8192), (4096, 8192)), 'float32'),
    (18, '18_Matmul_with_transposed_both',
     'torch.matmul(A.T, B.T)',
     ((8192, 2048), (4096, 8192)), 'float32'),
    (19, '19_ReLU',
     'torch.relu(x)',
     ((4096, 393216),), 'float32'),
    (20, '20_LeakyReLU',
     'torch.nn.functional.leaky_relu(x, negative_slope=self.negative_slope)',
     ((4096, 393216),), 'float32'),
    (21, '21_Sigmoid',
     'torch.sigmoid(x)',
     ((4096, 393216),), 'float32'),
    (22, '22_Tanh',
     'torch.tanh(x)',
     ((4096, 393216),), 'float32'),
    (23, '23_Softmax',
     'torch.softmax(x, dim=1)',
     ((4096, 393216),), 'float32'),
    (24, '24_LogSoftmax',
     'torch.log_softmax(x, dim=self.dim)',
     ((4096, 393216),), 'float32'),
    (25, '25_Swish',
     'x * torch.sigmoid(x)',
     ((4096, 393216),), 'float32'),
    (26, '26_GELU_',
     'torch.nn.functional.gelu(x)',
     ((4096, 393216),), 'float32'),
    (27, '27_SELU_',
     'torch.selu(x)',
     ((4096, 393216),), 'float32'),
    (28, '28_HardSigmoid',
     'torch.nn.functional.hardsigmoid(x)',
     ((4096, 393216),), 'float32'),
    (29, '29_Softplus',
     'torch.nn.functional.softplus(x)',
     ((4096, 393216),), 'float32'),
    (30, '30_Softsign',
     'x / (1 + torch.abs(x))',
     ((4096, 393216),), 'float32'),
    (31, '31_ELU',
     'F.elu(x, alpha=self.alpha)',
     ((4096, 393216),), 'float32'),
    (32, '32_HardTanh',
     'F.hardtanh(x, min_val=-1.0, max_val=1.0)',
     ((4096, 393216),), 'float32'),
    (33, '33_BatchNorm',
     'self.bn(x) with bn = nn.BatchNorm2d(num_features=num_features), init [64]',
     ((64, 64, 512, 512),), 'float32'),
    (34, '34_InstanceNorm',
     'self.inorm(x) with inorm = nn.InstanceNorm2d(num_features=num_features), init [64]',
     ((112, 64, 512, 512),), 'float32'),
    (35, '35_GroupNorm_',
     'self.gn(x) with gn = nn.GroupNorm(num_groups=num_groups, num_channels=num_features), init [64, 8]',
     ((112, 64, 512, 512),), 'float32'),
    (36, '36_RMSNorm_',
     'rms = torch.sqrt(torch.mean(x ** 2, dim=1, keepdim=True) + self.eps); x / rms',
     ((112, 64, 512, 512),), 'float32'),
    (37, '37_FrobeniusNorm_',
     "norm = torch.norm(x, p='fro'); x / norm",
     ((112, 64, 512, 512),), 'float32'),
    (38, '38_L1Norm_',
     'x / torch.mean(torch.abs(x), dim=1, keepdim=True)',
     ((32768, 65535),), 'float32'),
    (39, '39_L2Norm_',
     'x / torch.norm(x, p=2, dim=1, keepdim=True)',
     ((32768, 65535),), 'float32'),
    (40, '40_LayerNorm',
     'self.ln(x) with ln = nn.LayerNorm(normalized_shape=normalized_shape), init [[64, 256, 256]]',
     ((16, 64, 256, 256),), 'float32'),
    (41, '41_Max_Pooling_1D',
     'self.maxpool(x) with maxpool = nn.MaxPool1d(kernel_size=kernel_size, stride=stride, '
     'padding=padding, dilation=dilation, return_indices=return_indices), init [8, 1, 4, 3, False]',
     ((64, 192, 65536),), 'float32'),
    (42, '42_Max_Pooling_2D',
     'self.maxpool(x) with maxpool = nn.MaxPool2d(kernel_size=kernel_size, stride=stride, '
     'padding=padding, dilation=dilation), init [4, 1, 1, 1]',
     ((32, 64, 512, 512),), 'float32'),
    (43, '43_Max_Pooling_3D',
     'self.maxpool(x) with maxpool = nn.MaxPool3d(kernel_size=kernel_size, stride=stride, '
     'padding=padding, dilation=dilation, return_indices=return_indices, ceil_mode=ceil_mode), init [3, '
     '2, 1, 3]',
     ((16, 32, 128, 128, 128),), 'float32'),
    (44, '44_Average_Pooling_1D',
     'self.avg_pool(x) with avg_pool = nn.AvgPool1d(kernel_size=kernel_size, stride=stride, '
     'padding=padding), init [8, 1, 4]',
     ((64, 128, 65536),), 'float32'),
    (45, '45_Average_Pooling_2D',
     'self.avg_pool(x) with avg_pool = nn.AvgPool2d(kernel_size=kernel_size, stride=stride, '
     'padding=padding), init [11]',
     ((16, 64, 2048, 2048),), 'float32'),
    (46, '46_Average_Pooling_3D',
     'self.avg_pool(x) with avg_pool = nn.AvgPool3d(kernel_size=kernel_size, stride=stride, '
     'padding=padding), init [3, 2, 1]',
     ((16, 32, 128, 128, 256),), 'float32'),
    (47, '47_Sum_reduction_over_a_dimension',
     'torch.sum(x, dim=self.dim, keepdim=True)',
     ((128, 4096, 4095),), 'float32'),
    (48, '48_Mean_reduction_over_a_dimension',
     'torch.mean(x, dim=self.dim)',
     ((128, 4096, 4095),), 'float32'),
    (49, '49_Max_reduction_over_a_dimension',
     'torch.max(x, dim=self.dim)[0]',
     ((128, 4096, 4095),), 'float32'),
    (50, '50_conv_standard_2D__square_input__square_kernel',
     'x = self.conv1(x); x with conv1 = nn.Conv2d(in_channels=3, out_channels=96, kernel_size=11, '
     'stride=4, padding=2), init [1000]',
     ((256, 3, 224, 224),), 'float32'),
    (51, '51_Argmax_over_a_dimension',
     'torch.argmax(x, dim=self.dim)',
     ((128, 4096, 4095),), 'float32'),
    (52, '52_Argmin_over_a_dimension',
     'torch.argmin(x, dim=self.dim)',
     ((128, 4096, 4095),), 'float32'),
    (53, '53_Min_reduction_over_a_dimension',
     'torch.min(x, dim=self.dim)[0]',
     ((128, 4096, 4095),), 'float32'),
    (54, '54_conv_standard_3D__square_input__square_kernel',
     'self.conv3d(x) with conv3d = nn.Conv3d(in_channels, out_channels, (kernel_size, kernel_size, '
     'kernel_size), stride=stride, padding=padding, dilation=dilation, groups=groups, bias=bias), init '
     '[3, 64, 3]',
     ((16, 3, 64, 64, 64),), 'float32'),
    (55, '55_conv_standard_2D__asymmetric_input__square_kernel',
     'self.conv2d(x) with conv2d = nn.Conv2d(in_channels, out_channels, (kernel_size, kernel_size), '
     'stride=stride, padding=padding, dilation=dilation, groups=groups, bias=bias), init [64, 128, 3]',
     ((8, 64, 512, 1024),), 'float32'),
    (56, '56_conv_standard_2D__asymmetric_input__asymmetric_kernel',
     'self.conv2d(x) with conv2d = nn.Conv2d(in_channels, out_channels, kernel_size, stride=stride, '
     'padding=padding, dilation=dilation, groups=groups, bias=bias), init [64, 128, [5, 7]]',
     ((8, 64, 512, 256),), 'float32'),
    (57, '57_conv_transposed_2D__square_input__square_kernel',
     'self.conv_transpose2d(x) with conv_transpose2d = nn.ConvTranspose2d(in_channels, out_channels, '
     'kernel_size, stride=stride, padding=padding, output_padding=output_padding, groups=groups, '
     'bias=bias), init [64, 64, 3]',
     ((8, 64, 1024, 1024),), 'float32'),
    (58, '58_conv_transposed_3D__asymmetric_input__asymmetric_kernel',
     'self.conv_transpose3d(x) with conv_transpose3d = nn.ConvTranspose3d(in_channels, out_channels, '
     'kernel_size, stride=stride, padding=padding, output_padding=output_padding, groups=groups, '
     'bias=bias), init [32, 16, [3, 5, 7]]',
     ((16, 32, 16, 32, 64),), 'float32'),
    (59, '59_conv_standard_3D__asymmetric_input__square_kernel',
     'self.conv3d(x) with conv3d = nn.Conv3d(in_channels, out_channels, (kernel_size, kernel_size, 1), '
     'stride=stride, padding=padding, dilation=dilation, groups=groups, bias=bias), init [3, 64, 3]',
     ((16, 3, 256, 256, 10),), 'float32'),
    (60, '60_conv_standard_3D__square_input__asymmetric_kernel',
     'self.conv3d(x) with conv3d = nn.Conv3d(in_channels, out_channels, kernel_size, stride=stride, '
     'padding=padding, dilation=dilation, groups=groups, bias=bias), init [3, 64, [3, 5, 7]]',
     ((16, 3, 64, 64, 64),), 'float32'),
    (61, '61_conv_transposed_3D__square_input__square_kernel',
     'self.conv_transpose3d(x) with conv_transpose3d = nn.ConvTranspose3d(in_channels, out_channels, '
     'kernel_size=(kernel_size, kernel_size, kernel_size), stride=stride, padding=padding, '
     'output_padding=output_padding, groups=groups, bias=bias), init [48, 48, 3]',
     ((8, 48, 64, 64, 64),), 'float32'),
    (62, '62_conv_standard_2D__square_input__asymmetric_kernel',
     'self.conv2d(x) with conv2d = nn.Conv2d(in_channels, out_channels, kernel_size, stride=stride, '
     'padding=padding, dilation=dilation, groups=groups, bias=bias), init [32, 64, [5, 9]]',
     ((8, 32, 512, 512),), 'float32'),
    (63, '63_conv_standard_2D__square_input__square_kernel',
     'self.conv2d(x) with conv2d = nn.Conv2d(in_channels, out_channels, (kernel_size, kernel_size), '
     'stride=stride, padding=padding, dilation=dilation, groups=groups, bias=bias), init [16, 128, 3]',
     ((16, 16, 1024, 1024),), 'float32'),
    (64, '64_conv_transposed_1D',
     'self.conv1d_transpose(x) with conv1d_transpose = nn.ConvTranspose1d(in_channels, out_channels, '
     'kernel_size, stride=stride, padding=padding, output_padding=output_padding, groups=groups, '
     'bias=bias), init [128, 128, 3]',
     ((64, 128, 65536),), 'float32'),
    (65, '65_conv_transposed_2D__square_input__asymmetric_kernel',
     'self.conv_transpose2d(x) with conv_transpose2d = nn.ConvTranspose2d(in_channels, out_channels, '
     'kernel_size, stride=stride, padding=padding, output_padding=output_padding, groups=groups, '
     'bias=bias), init [64, 64, [3, 7]]',
     ((8, 64, 512, 512),), 'float32'),
    (66, '66_conv_standard_3D__asymmetric_input__asymmetric_kernel',
     'self.conv3d(x) with conv3d = nn.Conv3d(in_channels, out_channels, kernel_size, stride=stride, '
     'padding=padding, dilation=dilation, groups=groups, bias=bias), init [3, 64, [3, 5, 7]]',
     ((8, 3, 16, 128, 128),), 'float32'),
    (67, '67_conv_standard_1D',
     'self.conv1d(x) with conv1d = nn.Conv1d(in_channels, out_channels, kernel_size, stride=stride, '
     'padding=padding, dilation=dilation, groups=groups, bias=bias), init [64, 128, 3]',
     ((32, 64, 131072),), 'float32'),
    (68, '68_conv_transposed_3D__square_input__asymmetric_kernel',
     'self.conv_transpose3d(x) with conv_transpose3d = nn.ConvTranspose3d(in_channels, out_channels, '
     'kernel_size, stride=stride, padding=padding, output_padding=output_padding, groups=groups, '
     'bias=bias), init [32, 64, [3, 5, 5]]',
     ((16, 32, 64, 64, 64),), 'float32'),
    (69, '69_conv_transposed_2D__asymmetric_input__asymmetric_kernel',
     'self.conv_transpose2d(x) with conv_transpose2d = nn.ConvTranspose2d(in_channels, out_channels, '
     'kernel_size, stride=stride, padding=padding, output_padding=output_padding, dilation=dilation, '
     'groups=groups, bias=bias), init [64, 128, [3, 5]]',
     ((64, 64, 128, 256),), 'float32'),
    (70, '70_conv_transposed_3D__asymmetric_input__square_kernel',
     'self.conv_transpose3d(x) with conv_transpose3d = nn.ConvTranspose3d(in_channels, out_channels, '
     '(kernel_size, kernel_size, kernel_size), stride=stride, padding=padding, '
     'output_padding=output_padding, dilation=dilation, groups=groups, bias=bias), init [48, 24, 3]',
     ((8, 48, 96, 96, 96),), 'float32'),
    (71, '71_conv_transposed_2D__asymmetric_input__square_kernel',
     'self.conv_transpose2d(x) with conv_transpose2d = nn.ConvTranspose2d(in_channels, out_channels, '
     'kernel_size, stride=stride, padding=padding, output_padding=output_padding, groups=groups, '
     'bias=bias), init [32, 32, 3]',
     ((8, 32, 512, 1024),), 'float32'),
    (72, '72_conv_transposed_3D_asymmetric_input_asymmetric_kernel___strided_padded_grouped_',
     'self.conv_transpose3d(x) with conv_transpose3d = nn.ConvTranspose3d(in_channels, out_channels, '
     'kernel_size, stride=stride, padding=padding, output_padding=output_padding, groups=groups, '
     'bias=bias), init [32, 32, [3, 5, 7], [2, 2, 2], [1, 2, 3], [1, 1, 1], 4]',
     ((8, 32, 12, 24, 48),), 'float32'),
    (73, '73_conv_transposed_3D_asymmetric_input_square_kernel__strided_padded__grouped',
     'self.conv_transpose3d(x) with conv_transpose3d = nn.ConvTranspose3d(in_channels, out_channels, '
     'kernel_size=(kernel_size, kernel_size, kernel_size), stride=stride, padding=padding, groups=groups, '
     'bias=bias), init [32, 32, 3, 2, 1, 4]',
     ((4, 32, 32, 64, 128),), 'float32'),
    (74, '74_conv_transposed_1D_dilated',
     'self.conv1d_transpose(x) with conv1d_transpose = nn.ConvTranspose1d(in_channels, out_channels, '
     'kernel_size, stride=stride, padding=padding, dilation=dilation, bias=bias), init [32, 64, 5, 1, 0, '
     '3]',
     ((32, 32, 131072),), 'float32'),
    (75, '75_conv_transposed_2D_asymmetric_input_asymmetric_kernel_strided__grouped____padded____dilated__',
     'self.conv_transpose2d(x) with conv_transpose2d = nn.ConvTranspose2d(in_channels, out_channels, '
     'kernel_size, stride=stride, padding=padding, dilation=dilation, groups=groups, bias=bias), init '
     '[32, 64, [3, 5], [2, 3], [1, 2], [2, 1], 4]',
     ((16, 32, 128, 256),), 'float32'),
    (76, '76_conv_standard_1D_dilated_strided__',
     'self.conv1d(x) with conv1d = nn.Conv1d(in_channels, out_channels, kernel_size, stride=stride, '
     'dilation=dilation, bias=bias), init [64, 128, 3, 3, 4]',
     ((64, 64, 524280),), 'float32'),
    (77, '77_conv_transposed_3D_square_input_square_kernel___padded____dilated____strided__',
     'self.conv_transpose3d(x) with conv_transpose3d = nn.ConvTranspose3d(in_channels, out_channels, '
     'kernel_size=(kernel_size, kernel_size, kernel_size), stride=stride, padding=padding, '
     'dilation=dilation, bias=bias), init [32, 64, 3, 2, 1, 2]',
     ((16, 32, 16, 32, 32),), 'float32'),
    (78, '78_conv_transposed_2D_asymmetric_input_asymmetric_kernel___padded__',
     'self.conv_transpose2d(x) with conv_transpose2d = nn.ConvTranspose2d(in_channels, out_channels, '
     'kernel_size, stride=stride, padding=padding, bias=bias), init [32, 32, [3, 7], [1, 1], [1, 3]]',
     ((8, 32, 512, 1024),), 'float32'),
    (79, '79_conv_transposed_1D_asymmetric_input_square_kernel___padded____strided____dilated__',
     'self.conv1d_transpose(x) with conv1d_transpose = nn.ConvTranspose1d(in_channels, out_channels, '
     'kernel_size, stride=stride, padding=padding, dilation=dilation, bias=bias), init [32, 64, 3, 2, 1, '
     '2]',
     ((16, 32, 131072),), 'float32'),
    (80, '80_conv_standard_2D_square_input_asymmetric_kernel___dilated____padded__',
     'self.conv2d(x) with conv2d = nn.Conv2d(in_channels, out_channels, kernel_size, stride=stride, '
     'padding=padding, dilation=dilation, bias=bias), init [32, 64, [5, 9], 1, [2, 4], [2, 3]]',
     ((8, 32, 512, 512),), 'float32'),
    (81, '81_conv_transposed_2D_asymmetric_input_square_kernel___dilated____padded____strided__',
     'self.conv_transpose2d(x) with conv_transpose2d = nn.ConvTranspose2d(in_channels, out_channels, '
     'kernel_size, stride=stride, padding=padding, dilation=dilation, bias=bias), init [32, 64, 3, 5, 1, '
     '2]',
     ((16, 32, 64, 128),), 'float32'),
    (82, '82_conv_depthwise_2D_square_input_square_kernel',
     'self.conv2d(x) with conv2d = nn.Conv2d(in_channels, in_channels, kernel_size, stride=stride, '
     'padding=padding, groups=in_channels, bias=bias), init [64, 3, 1, 0]',
     ((16, 64, 512, 512),), 'float32'),
    (83, '83_conv_depthwise_2D_square_input_asymmetric_kernel',
     'self.conv2d(x) with conv2d = nn.Conv2d(in_channels, in_channels, kernel_size=(kernel_size, 1), '
     'stride=stride, padding=padding, dilation=dilation, groups=in_channels, bias=bias), init [8, 3, 1, '
     '0, 1]',
     ((64, 8, 512, 512),), 'float32'),
    (84, '84_conv_depthwise_2D_asymmetric_input_square_kernel',
     'self.conv2d(x) with conv2d = nn.Conv2d(in_channels, out_channels, kernel_size=(kernel_size, '
     'kernel_size), stride=stride, padding=padding, groups=in_channels, bias=bias), init [128, 128, 3, 1, '
     '0]',
     ((64, 128, 256, 512),), 'float32'),
    (85, '85_conv_depthwise_2D_asymmetric_input_asymmetric_kernel',
     'self.conv2d(x) with conv2d = nn.Conv2d(in_channels, in_channels, (kernel_size_h, kernel_size_w), '
     'stride=(stride_h, stride_w), padding=(padding_h, padding_w), dilation=(dilation_h, dilation_w), '
     'groups=in_channels, bias=bias), init [128, 128, 3, 7, 1, 1, 0, 0, 1, 1, 128]',
     ((32, 128, 128, 256),), 'float32'),
    (86, '86_conv_depthwise_separable_2D',
     'x = self.depthwise(x); x = self.pointwise(x); x with depthwise = nn.Conv2d(in_channels, '
     'in_channels, kernel_size, stride=stride, padding=padding, dilation=dilation, groups=in_channels, '
     'bias=bias); pointwise = nn.Conv2d(in_channels, out_channels, kernel_size=1, bias=bias), init [64, '
     '128, 3, 1, 1, 1]',
     ((16, 64, 512, 512),), 'float32'),
    (87, '87_conv_pointwise_2D',
     'self.conv1d(x) with conv1d = nn.Conv2d(in_channels, out_channels, kernel_size=1, stride=1, '
     'padding=0, bias=bias), init [64, 128]',
     ((16, 64, 1024, 1024),), 'float32'),
    (88, '88_MinGPTNewGelu',
     '0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))',
     ((8192, 8192),), 'float32'),
    (89, '89_cumsum',
     'torch.cumsum(x, dim=self.dim)',
     ((32768, 32768),), 'float32'),
    (90, '90_cumprod',
     'torch.cumprod(x, dim=self.dim)',
     ((32768, 32768),), 'float32'),
    (91, '91_cumsum_reverse',
     'torch.cumsum(x.flip(self.dim), dim=self.dim).flip(self.dim)',
     ((32768, 32768),), 'float32'),
    (92, '92_cumsum_exclusive',
     'cumsum = torch.cumsum(x.narrow(dim=self.dim, start=0, length=x.size(self.dim) - 1), dim=self.dim); '
     'torch.cat((torch.zeros_like(x.select(self.dim, 0).unsqueeze(self.dim)), cumsum), dim=self.dim)',
     ((32768, 32768),), 'float32'),
    (93, '93_masked_cumsum',
     'torch.cumsum(x * mask, dim=self.dim)',
     ((32768, 32768), (32768, 32768)), 'bool, float32'),
    (94, '94_MSELoss',
     'torch.mean((predictions - targets) ** 2)',
     ((32768, 32768), (32768, 32768)), 'float32'),
    (95, '95_CrossEntropyLoss',
     'torch.nn.functional.cross_entropy(predictions, targets)',
     ((32768, 4096), (32768,)), 'float32, int64'),
    (96, '96_HuberLoss',
     'torch.nn.functional.smooth_l1_loss(predictions, targets)',
     ((32768, 32768), (32768, 32768)), 'float32'),
    (97, '97_ScaledDotProductAttention',
     'out = torch.nn.functional.scaled_dot_product_attention(Q, K, V); out',
     ((32, 32, 512, 1024), (32, 32, 512, 1024), (32, 32, 512, 1024)), 'float32'),
    (98, '98_KLDivLoss',
     "torch.nn.functional.kl_div(torch.log(predictions), targets, reduction='batchmean')",
     ((16384, 16384), (16384, 16384)), 'float32'),
    (99, '99_TripletMarginLoss',
     'self.loss_fn(anchor, positive, negative) with loss_fn = torch.nn.TripletMarginLoss(margin=margin), '
     'init [1.0]',
     ((32768, 8192), (32768, 8192), (32768, 8192)), 'float32'),
    (100, '100_HingeLoss',
     'torch.mean(torch.clamp(1 - predictions * targets, min=0))',
     ((32768, 32768), (32768,)), 'float32'),
)


@dataclass(frozen=True)
class Run:
    """How a spec runs one problem.

    ``make(sizes, draw, device)`` gives the forward's arguments at ``sizes`` (the problem's own
    in ``sizes``; smaller odd ones in ``small`` for the interpreter, ``more`` for the GPU);
    ``forward`` is the problem's torch expression on them; ``launch(launcher, *arguments)`` calls
    the kernel's launcher and gives what ``forward`` gives."""

    kernel: str
    forward: Callable[..., torch.Tensor]
    make: Callable[[tuple[int, ...], Draw, str], tuple]
    sizes: tuple[int, ...]
    small: tuple[int, ...]
    more: tuple[tuple[int, ...], ...] = ()
    launch: Callable[..., torch.Tensor] = lambda f, *xs: f(*xs)
    note: str = ""


def _one(shape_of: Callable[[tuple[int, ...]], tuple[int, ...]]):
    return lambda s, draw, device: (draw(shape_of(s), device),)


def _two(a_of, b_of, a_then=lambda a: a, b_then=lambda b: b):
    return lambda s, draw, device: (a_then(draw(a_of(s), device)), b_then(draw(b_of(s), device)))


def _symmetric(a: torch.Tensor) -> torch.Tensor:
    return (a + a.T) / 2


_rows = _one(lambda s: s)


def _affine(*extra):  # x, and the module's weight 1 and bias 0 per channel (then extra, eps)
    def make(s, draw, device):
        ones, zeros = torch.ones(s[1], device=device), torch.zeros(s[1], device=device)
        return (draw(s, device), ones, zeros, *[e(s) for e in extra], 1e-5)

    return make


def _scaled_pair(s, draw, device):  # MSE's and Huber's: predictions scaled by a random number
    return draw(s, device) * torch.rand((), device=device), draw(s, device)


def _chw(s, draw, device):  # LayerNorm((C, H, W)): weight 1, bias 0 of that shape
    return (draw(s, device), torch.ones(s[1:], device=device), torch.zeros(s[1:], device=device), 1e-5)


def _elementwise(kernel: str, forward, **keywords) -> Run:
    return Run(kernel, forward, _rows, (4096, 393216), (37, 301), ((4096, 4097), (1000, 777)),
               launch=(lambda f, x: f(x, **keywords)) if keywords else (lambda f, x: f(x)))


def _matmul(forward, a_of, b_of, launch, sizes, small, note="", a_then=lambda a: a) -> Run:
    return Run("matmul_fast", forward, _two(a_of, b_of, a_then, a_then), sizes, small, launch=launch,
               note=note or "matmul_fast: f32 operands in TF32 (Triton's dot default; torch's matmul is full f32)")



def _conv_parameters(o: int, c: int, window: tuple[int, ...], bias: bool, device: str):
    """The weight ``[o, c, *window]`` (and a bias ``[o]``, else None) as ``nn.Conv*d`` starts them:
    uniform in +-1 / sqrt(c * window's taps), drawn from a generator seeded with 0."""
    generator = torch.Generator().manual_seed(0)
    bound = (c * math.prod(window)) ** -0.5
    w = (torch.rand((o, c, *window), generator=generator) * 2 - 1) * bound
    b = (torch.rand((o,), generator=generator) * 2 - 1) * bound if bias else None
    return w.to(device), None if b is None else b.to(device)


def _conv(window: tuple[int, ...], sizes, small, stride=1, padding=0, dilation=1, bias=False, note="",
          implicit=False) -> Run:
    """nn.Conv1d/2d/3d (groups 1) with the window ``window``: ``sizes`` are x's shape, then the
    output channels; stride, padding and dilation as the module takes them (a number or one per
    dimension; conv1d and conv3d take one number for all). ``implicit``: the spec's implicit-GEMM
    form (``conv2d_implicit_gemm``, ``conv3d_implicit_gemm``: the reduction over channels and taps
    in one axis), the form for few input channels and a large window."""
    kernel, conv = {1: ("conv1d", F.conv1d), 2: ("conv2d", F.conv2d), 3: ("conv3d", F.conv3d)}[len(window)]
    kernel += "_implicit_gemm" if implicit else ""
    if len(window) == 2:  # conv2d's launcher: sh, sw, ph, pw, dh, dw
        scalars = tuple(n for v in (stride, padding, dilation) for n in (v if isinstance(v, tuple) else (v, v)))
    else:
        scalars = (stride, padding, dilation)

    def make(s, draw, device):
        return (draw(s[:-1], device), *_conv_parameters(s[-1], s[1], window, bias, device))

    return Run(kernel, lambda x, w, b: conv(x, w, b, stride, padding, dilation), make, sizes, small,
               launch=lambda f, x, w, b: f(x, w, b, *scalars),
               note=note or f"{kernel}: f32 operands in TF32 (Triton's dot default; cuDNN's default for torch's too)")


def _depthwise_separable(window: tuple[int, int], sizes, small, stride=1, padding=0, dilation=1) -> Run:
    """nn.Conv2d(C, C, window, stride, padding, dilation, groups=C) then nn.Conv2d(C, O, 1) (no
    biases, as the suite's): ``sizes`` are x's shape, then the output channels."""
    def make(s, draw, device):
        return (draw(s[:-1], device), _conv_parameters(s[1], 1, window, False, device)[0],
                _conv_parameters(s[-1], s[1], (1, 1), False, device)[0])

    def separable(x, wd, wp):
        return F.conv2d(F.conv2d(x, wd, None, stride, padding, dilation, groups=x.shape[1]), wp)

    settings = (stride, stride, padding, padding, dilation, dilation)
    return Run("conv2d_depthwise_separable", separable, make, sizes, small,
               launch=lambda f, x, wd, wp: f(x, wd, wp, *settings),
               note="one kernel: the depthwise row of each channel tile, then its pointwise dot (TF32 for f32)")


def _conv_transpose(window: tuple[int, ...], sizes, small, padding=0, dilation=1, stride=1, output_padding=0,
                    groups=1) -> Run:
    """nn.ConvTranspose1d/2d/3d (no bias, as the suite's): ``sizes`` are x's shape, then the output
    channels; the weight ``[C, O / groups, *window]`` as the module starts it (uniform in +-1 /
    sqrt(O / groups * taps), its fan-in); padding, dilation, stride and output padding a number or
    one per dimension (conv_transpose1d and conv_transpose3d take one number for all; the grouped
    specs one per dimension, after the groups)."""
    grouped = "_grouped" if groups > 1 else ""
    kernel, conv = {1: ("conv_transpose1d", F.conv_transpose1d), 2: ("conv_transpose2d", F.conv_transpose2d),
                    3: ("conv_transpose3d", F.conv_transpose3d)}[len(window)]
    kernel += grouped
    settings = (padding, dilation, stride, output_padding)
    if len(window) == 2 or grouped:  # one of each per dimension: ph, pw, dh, dw, sh, sw, oph, opw
        scalars = tuple(n for v in settings for n in (v if isinstance(v, tuple) else (v,) * len(window)))
    else:
        scalars = settings
    scalars = (groups, *scalars) if grouped else scalars

    def make(s, draw, device):
        return (draw(s[:-1], device), _conv_parameters(s[1], s[-1] // groups, window, False, device)[0])

    def launch(f, x, w):
        return f(x, w, *scalars) if grouped else f(x, w, None, *scalars)

    return Run(kernel, lambda x, w: conv(x, w, None, stride, padding, output_padding, groups, dilation), make, sizes,
               small, launch=launch,
               note=f"{kernel}: x read at (o + padding - dilation * k) // stride for each tap k the stride "
                    "divides; f32 operands in TF32")


def _depthwise(window: tuple[int, int], sizes, small) -> Run:
    """nn.Conv2d(C, C, window, groups=C) (stride 1, padding 0, dilation 1, no bias, as the suite's
    depthwise problems): ``sizes`` are x's shape."""
    def make(s, draw, device):
        return (draw(s, device), _conv_parameters(s[1], 1, window, False, device)[0])

    return Run("conv2d_depthwise", lambda x, w: F.conv2d(x, w, groups=x.shape[1]), make, sizes, small)


_mm = lambda A, B: torch.matmul(A, B)  # noqa: E731
_call = lambda f, A, B: f(A, B)  # noqa: E731
_MK_KN = (lambda s: (s[0], s[1]), lambda s: (s[1], s[2]))
ROWS = ((4096, 4097), (4096, 1000), (1000, 777))
MIDDLE = ((16, 1000, 777),)
LOSSES = ((4096, 4097), (1000, 777))

#: problem number -> how a spec runs it.
RUNS: dict[int, Run] = {
    1: _matmul(_mm, *_MK_KN, _call, (4096, 4096, 4096), (37, 29, 21)),
    2: _matmul(_mm, *_MK_KN, _call, (2048, 8192, 4096), (37, 29, 21)),
    3: Run("bmm", lambda A, B: torch.bmm(A, B),
           _two(lambda s: (s[0], s[1], s[2]), lambda s: (s[0], s[2], s[3])), (128, 512, 1024, 2048), (3, 37, 29, 21),
           note="bmm: f32 operands in TF32, as matmul_fast"),
    4: Run("matvec", _mm, _two(lambda s: s, lambda s: (s[1], 1)), (2048, 1048576), (37, 301), ((2048, 4097),)),
    5: Run("matrix_scalar", lambda A, s: A * s, lambda s, draw, device: (draw(s, device), 3.14),
           (65536, 16384), (37, 301), ((4096, 4097),)),
    6: _matmul(_mm, *_MK_KN, _call, (256, 524288, 256), (37, 301, 21),
               note="matmul_fast: split-K where the tiles are too few; f32 in TF32"),
    7: _matmul(_mm, *_MK_KN, _call, (32768, 64, 32768), (37, 9, 21)),
    8: _matmul(_mm, *_MK_KN, _call, (8205, 2949, 5921), (37, 29, 21)),
    9: _matmul(_mm, *_MK_KN, _call, (32768, 32, 32768), (37, 5, 21)),
    10: _matmul(_mm, lambda s: s[:3], lambda s: (s[2], s[3]),
                lambda f, A, B: f(A.reshape(-1, A.shape[-1]), B).view(*A.shape[:-1], B.shape[1]),
                (16, 1024, 2048, 768), (3, 37, 29, 21),
                note="matmul_fast on A viewed as [N * M, K] (a view of a contiguous tensor); f32 in TF32"),
    11: _matmul(lambda A, B: torch.einsum("bijl,lk->bijk", A, B), lambda s: s[:4], lambda s: (s[3], s[4]),
                lambda f, A, B: f(A.reshape(-1, A.shape[-1]), B).view(*A.shape[:-1], B.shape[1]),
                (8, 256, 512, 256, 768), (2, 3, 7, 29, 21),
                note="matmul_fast on A viewed as [b * i * j, l] (a view of a contiguous tensor); f32 in TF32"),
    12: Run("diag_matmul", lambda A, B: A.unsqueeze(1) * B, _two(lambda s: (s[0],), lambda s: s),
            (4096, 4096), (37, 301), ((1000, 777),)),
    13: _matmul(_mm, *_MK_KN, _call, (4096, 4096, 4096), (37, 37, 37), a_then=_symmetric),
    14: Run("matmul_triu", lambda A, B: torch.triu(torch.matmul(A, B)),
            _two(lambda s: (s[0], s[0]), lambda s: (s[0], s[0]), torch.triu, torch.triu), (4096,), (37,),
            note="full f32 (precision=ieee); the zero triangles are not read (k between the diagonals)"),
    15: Run("matmul_tril", lambda A, B: torch.tril(torch.matmul(A, B)),
            _two(lambda s: (s[0], s[0]), lambda s: (s[0], s[0]), torch.tril, torch.tril), (4096,), (37,),
            note="full f32 (precision=ieee); the zero triangles are not read (k between the diagonals)"),
    16: _matmul(lambda A, B: torch.matmul(A.T, B), lambda s: (s[1], s[0]), lambda s: (s[1], s[2]),
                lambda f, A, B: f(A.T, B), (2048, 8192, 4096), (37, 29, 21),
                note="matmul_fast on the view A.T (its strides, no copy); f32 in TF32"),
    17: _matmul(lambda A, B: torch.matmul(A, B.T), lambda s: (s[0], s[1]), lambda s: (s[2], s[1]),
                lambda f, A, B: f(A, B.T), (2048, 8192, 4096), (37, 29, 21),
                note="matmul_fast on the view B.T (its strides, no copy); f32 in TF32"),
    18: _matmul(lambda A, B: torch.matmul(A.T, B.T), lambda s: (s[1], s[0]), lambda s: (s[2], s[1]),
                lambda f, A, B: f(A.T, B.T), (2048, 8192, 4096), (37, 29, 21),
                note="matmul_fast on the views A.T, B.T (their strides, no copies); f32 in TF32"),
    19: _elementwise("activation", torch.relu, act="relu"),
    20: _elementwise("activation", lambda x: F.leaky_relu(x, negative_slope=0.01), act="leaky_relu"),
    21: _elementwise("activation", torch.sigmoid, act="sigmoid"),
    22: _elementwise("activation_tanh", torch.tanh),
    23: Run("softmax", lambda x: torch.softmax(x, dim=1), _rows, (4096, 393216), (37, 301), ((4096, 4097),)),
    24: Run("log_softmax", lambda x: torch.log_softmax(x, dim=1), _rows, (4096, 393216), (37, 301), ((4096, 4097),)),
    25: _elementwise("activation", lambda x: x * torch.sigmoid(x), act="silu"),
    26: _elementwise("activation", F.gelu, act="gelu"),
    27: _elementwise("activation_selu", torch.selu),
    28: _elementwise("activation_hardsigmoid", F.hardsigmoid),
    29: _elementwise("activation_softplus", F.softplus),
    30: _elementwise("activation_softsign", lambda x: x / (1 + torch.abs(x))),
    31: Run("activation_elu", lambda x, alpha: F.elu(x, alpha=alpha), lambda s, draw, device: (draw(s, device), 1.0),
            (4096, 393216), (37, 301), ((4096, 4097), (1000, 777))),
    32: _elementwise("activation_hardtanh", lambda x: F.hardtanh(x, min_val=-1.0, max_val=1.0)),
    33: Run("batch_norm", lambda x, w, b, eps: F.batch_norm(x, None, None, w, b, training=True, eps=eps),
            _affine(), (64, 64, 512, 512), (3, 5, 7, 9), ((16, 32, 256, 257),),
            note="training mode (batch statistics), as the module runs in KernelBench"),
    34: Run("group_norm", lambda x, w, b, groups, eps: F.instance_norm(x, eps=eps),
            _affine(lambda s: s[1]), (112, 64, 512, 512), (1, 3, 3, 5), ((16, 64, 256, 257),),
            note="group_norm with one channel per group (G = C), weight 1 and bias 0: InstanceNorm2d's "
                 "affine=False result, at the cost of reading 2 * C more numbers"),
    35: Run("group_norm", lambda x, w, b, groups, eps: F.group_norm(x, groups, w, b, eps),
            _affine(lambda s: 8), (112, 64, 512, 512), (1, 8, 3, 5), ((16, 64, 256, 257),)),
    36: Run("rms_norm_channels",
            lambda x, eps: x / torch.sqrt(torch.mean(x ** 2, dim=1, keepdim=True) + eps),
            lambda s, draw, device: (draw(s, device), 1e-5), (112, 64, 512, 512), (3, 5, 7, 9), ((16, 64, 256, 257),)),
    37: Run("frobenius_norm", lambda x: x / torch.norm(x, p="fro"), _rows, (112, 64, 512, 512), (3, 5, 7, 9),
            ((16, 64, 256, 257),)),
    38: Run("l1_norm", lambda x: x / torch.mean(torch.abs(x), dim=1, keepdim=True), _rows, (32768, 65535), (37, 301),
            ((4096, 4097), (1000, 777))),
    39: Run("l2_norm", lambda x: x / torch.norm(x, p=2, dim=1, keepdim=True), _rows, (32768, 65535), (37, 301),
            ((4096, 4097), (1000, 777))),
    40: Run("layer_norm_chw", lambda x, w, b, eps: F.layer_norm(x, x.shape[1:], w, b, eps), _chw,
            (16, 64, 256, 256), (2, 3, 5, 7), ((4, 64, 256, 257),)),
    47: Run("sum_dim1", lambda x: torch.sum(x, dim=1, keepdim=True), _rows, (128, 4096, 4095), (3, 37, 29), MIDDLE,
            launch=lambda f, x: f(x).unsqueeze(1), note="keepdim=True as the view unsqueeze(1)"),
    48: Run("mean_dim1", lambda x: torch.mean(x, dim=1), _rows, (128, 4096, 4095), (3, 37, 29), MIDDLE),
    49: Run("max_dim1", lambda x: torch.max(x, dim=1)[0], _rows, (128, 4096, 4095), (3, 37, 29), MIDDLE),
    51: Run("argmax_dim1", lambda x: torch.argmax(x, dim=1), _rows, (128, 4096, 4095), (3, 37, 29), MIDDLE),
    52: Run("argmin_dim1", lambda x: torch.argmin(x, dim=1), _rows, (128, 4096, 4095), (3, 37, 29), MIDDLE),
    53: Run("min_dim1", lambda x: torch.min(x, dim=1)[0], _rows, (128, 4096, 4095), (3, 37, 29), MIDDLE),
    50: _conv((11, 11), (256, 3, 224, 224, 96), (1, 3, 10, 19, 13), stride=4, padding=2, bias=True, implicit=True,
              note="conv2d_implicit_gemm: 3 input channels, the reduction over (c, kh, kw) in tiles of 32"),
    54: _conv((3, 3, 3), (16, 3, 64, 64, 64, 64), (1, 3, 4, 3, 7, 13)),
    55: _conv((3, 3), (8, 64, 512, 1024, 128), (1, 19, 4, 19, 13)),
    56: _conv((5, 7), (8, 64, 512, 256, 128), (1, 5, 6, 11, 13)),
    59: _conv((3, 3, 1), (16, 3, 256, 256, 10, 64), (1, 3, 4, 5, 4, 13)),
    60: _conv((3, 5, 7), (16, 3, 64, 64, 64, 64), (1, 3, 3, 5, 9, 13), implicit=True),
    62: _conv((5, 9), (8, 32, 512, 512, 64), (1, 9, 6, 13, 13)),
    63: _conv((3, 3), (16, 16, 1024, 1024, 128), (1, 5, 5, 19, 13)),
    66: _conv((3, 5, 7), (8, 3, 16, 128, 128, 64), (1, 3, 3, 5, 10, 13), implicit=True),
    67: _conv((3,), (32, 64, 131072, 128), (2, 19, 37, 21)),
    76: _conv((3,), (64, 64, 524280, 128), (2, 19, 53, 21), stride=3, dilation=4),
    80: _conv((5, 9), (8, 32, 512, 512, 64), (1, 9, 6, 21, 13), padding=(2, 4), dilation=(2, 3)),
    82: _depthwise((3, 3), (16, 64, 512, 512), (1, 9, 4, 19)),
    83: _depthwise((3, 1), (64, 8, 512, 512), (1, 5, 7, 19)),
    84: _depthwise((3, 3), (64, 128, 256, 512), (1, 9, 4, 19)),
    85: _depthwise((3, 7), (32, 128, 128, 256), (1, 5, 4, 21)),
    57: _conv_transpose((3, 3), (8, 64, 1024, 1024, 64), (1, 19, 4, 19, 13)),
    58: _conv_transpose((3, 5, 7), (16, 32, 16, 32, 64, 16), (1, 2, 1, 1, 2, 3)),
    61: _conv_transpose((3, 3, 3), (8, 48, 64, 64, 64, 48), (1, 2, 2, 2, 3, 5)),
    64: _conv_transpose((3,), (64, 128, 65536, 128), (2, 19, 37, 21)),
    65: _conv_transpose((3, 7), (8, 64, 512, 512, 64), (1, 19, 4, 13, 13)),
    68: _conv_transpose((3, 5, 5), (16, 32, 64, 64, 64, 64), (1, 2, 1, 1, 2, 3)),
    69: _conv_transpose((3, 5), (64, 64, 128, 256, 128), (1, 19, 4, 13, 13)),
    70: _conv_transpose((3, 3, 3), (8, 48, 96, 96, 96, 24), (1, 2, 2, 2, 3, 5)),
    71: _conv_transpose((3, 3), (8, 32, 512, 1024, 32), (1, 19, 4, 19, 13)),
    74: _conv_transpose((5,), (32, 32, 131072, 64), (2, 19, 37, 21), dilation=3),
    78: _conv_transpose((3, 7), (8, 32, 512, 1024, 32), (1, 9, 6, 13, 13), padding=(1, 3)),
    72: _conv_transpose((3, 5, 7), (8, 32, 12, 24, 48, 32), (1, 8, 1, 1, 1, 4), padding=(1, 2, 3), stride=(2, 2, 2),
                        output_padding=(1, 1, 1), groups=4),
    73: _conv_transpose((3, 3, 3), (4, 32, 32, 64, 128, 32), (1, 4, 1, 2, 2, 4), padding=1, stride=2, groups=4),
    75: _conv_transpose((3, 5), (16, 32, 128, 256, 64), (1, 4, 2, 3, 4), padding=(1, 2), dilation=(2, 1),
                        stride=(2, 3), groups=4),
    77: _conv_transpose((3, 3, 3), (16, 32, 16, 32, 32, 64), (1, 2, 1, 2, 2, 3), padding=1, dilation=2, stride=2),
    79: _conv_transpose((3,), (16, 32, 131072, 64), (2, 7, 37, 9), padding=1, dilation=2, stride=2),
    81: _conv_transpose((3, 3), (16, 32, 64, 128, 64), (1, 5, 3, 4, 7), padding=1, dilation=2, stride=5),
    86: _depthwise_separable((3, 3), (16, 64, 512, 512, 128), (1, 9, 6, 11, 13), padding=1),
    87: _conv((1, 1), (16, 64, 1024, 1024, 128), (1, 19, 3, 19, 21),
              note="conv2d with a 1 x 1 window: one tap, the dot over channel tiles; f32 operands in TF32"),
    88: Run("new_gelu", lambda x: 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (
            x + 0.044715 * torch.pow(x, 3.0)))), _rows, (8192, 8192), (37, 301), ((4096, 4097), (1000, 777))),
    89: Run("row_cumsum", lambda x: torch.cumsum(x, dim=1), _rows, (32768, 32768), (9, 301), ROWS),
    90: Run("row_cumprod", lambda x: torch.cumprod(x, dim=1),
            lambda s, draw, device: (draw(s, device) * 0.2 + 0.9,), (32768, 32768), (9, 301), ROWS,
            note="values drawn in [0.9, 1.1] (the suite's torch.rand makes every product 0 after a few "
                 "hundred columns)"),
    91: Run("row_cumsum_reverse", lambda x: torch.cumsum(x.flip(1), dim=1).flip(1), _rows, (32768, 32768), (9, 301),
            ROWS),
    92: Run("cumsum_exclusive",
            lambda x: torch.cat((torch.zeros_like(x.select(1, 0).unsqueeze(1)),
                                 torch.cumsum(x.narrow(dim=1, start=0, length=x.size(1) - 1), dim=1)), dim=1),
            _rows, (32768, 32768), (9, 301), ROWS,
            note="the inclusive scan less x (the scan of x[r, c - 1] is refused in tiles: "
                 "specs/cumsum_exclusive.tile's comment)"),
    93: Run("cumsum_masked", lambda x, mask: torch.cumsum(x * mask, dim=1),
            lambda s, draw, device: (draw(s, device), torch.randint(0, 2, s, device=device).bool()),
            (32768, 32768), (9, 301), ROWS),
    94: Run("mse_loss", lambda p, t: torch.mean((p - t) ** 2), _scaled_pair, (32768, 32768), (37, 301), LOSSES),
    95: Run("cross_entropy_loss", lambda p, t: F.cross_entropy(p, t),
            lambda s, draw, device: (draw(s, device), torch.randint(0, s[1], (s[0],), device=device)),
            (32768, 4096), (37, 301), ((4096, 4097), (1000, 777))),
    96: Run("huber_loss", lambda p, t: F.smooth_l1_loss(p, t), _scaled_pair, (32768, 32768), (37, 301), LOSSES),
    97: Run("attention_wide", lambda q, k, v: F.scaled_dot_product_attention(q, k, v),
            lambda s, draw, device: tuple(draw(s, device) for _ in range(3)), (32, 32, 512, 1024), (2, 3, 37, 40),
            ((32, 32, 512, 64),), launch=lambda f, q, k, v: f(q, k, v, q.shape[-1] ** -0.5),
            note="attention_wide.tile at scale 1 / sqrt(D): D = 1024 in tiles (the scores summed over tiles of D, "
                 "the output in column tiles across programs; attention.tile holds D whole)"),
    98: Run("kl_div", lambda p, t: F.kl_div(torch.log(p), t, reduction="batchmean"),
            lambda s, draw, device: ((draw(s, device) * torch.rand((), device=device)).softmax(dim=-1),
                                     draw(s, device).softmax(dim=-1)),
            (16384, 16384), (37, 301), ((4096, 4097), (1000, 777))),
    41: Run("max_pool1d", lambda x: F.max_pool1d(x, 8, stride=1, padding=4, dilation=3), _rows,
            (64, 192, 65536), (2, 3, 67), launch=lambda f, x: f(x, 8, 1, 4, 3)),
    42: Run("max_pool2d", lambda x: F.max_pool2d(x, 4, stride=1, padding=1, dilation=1), _rows,
            (32, 64, 512, 512), (2, 3, 19, 21), launch=lambda f, x: f(x, 4, 1, 1, 1)),
    43: Run("max_pool3d", lambda x: F.max_pool3d(x, 3, stride=2, padding=1, dilation=3), _rows,
            (16, 32, 128, 128, 128), (1, 2, 13, 12, 11), launch=lambda f, x: f(x, 3, 2, 1, 3)),
    44: Run("avg_pool1d", lambda x: F.avg_pool1d(x, 8, stride=1, padding=4), _rows,
            (64, 128, 65536), (2, 3, 67), launch=lambda f, x: f(x, 8, 1, 4)),
    45: Run("avg_pool2d", lambda x: F.avg_pool2d(x, 11), _rows,
            (16, 64, 2048, 2048), (1, 2, 25, 30), launch=lambda f, x: f(x, 11, 11, 0)),
    46: Run("avg_pool3d", lambda x: F.avg_pool3d(x, 3, stride=2, padding=1), _rows,
            (16, 32, 128, 128, 256), (1, 2, 9, 10, 11), launch=lambda f, x: f(x, 3, 2, 1)),
    99: Run("triplet_margin_loss", lambda a, p, n, margin: F.triplet_margin_loss(a, p, n, margin=margin),
            lambda s, draw, device: (draw(s, device) * torch.rand((), device=device), draw(s, device),
                                     draw(s, device), 1.0),
            (32768, 8192), (37, 301), ((4096, 4097), (1000, 777))),
    100: Run("hinge_loss", lambda p, t: torch.mean(torch.clamp(1 - p * t, min=0)),
             lambda s, draw, device: (draw(s, device), torch.randint(0, 2, s[1:], device=device).float() * 2 - 1),
             (32768, 32768), (37, 301), LOSSES,
             note="the targets broadcast along the last dimension (the suite's [batch_size] equals it)"),
}

#: problem number -> why no spec runs it yet (none now: every problem has its spec).
NOT_YET: dict[int, str] = {}


def problem(number: int) -> tuple[int, str, str, tuple, str]:
    """The suite's row of problem ``number``."""
    return next(row for row in SUITE if row[0] == number)

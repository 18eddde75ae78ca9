module {
  func.func @nncert(%arg0: !torch.vtensor<[3,1],f32>, %arg1: !torch.vtensor<[3,3],f32>) -> (!torch.vtensor<[3,3],f32>, !torch.vtensor<[3,3],f32>) attributes {torch.onnx_meta.ir_version = 10 : si64, torch.onnx_meta.opset_version = 21 : si64, torch.onnx_meta.producer_name = "nncert", torch.onnx_meta.producer_version = ""} {
    %0 = torch.operator "onnx.Constant"() {torch.onnx.value = dense_resource<n2> : tensor<1xsi64>} : () -> !torch.vtensor<[1],si64> 
    %1 = torch.operator "onnx.Constant"() {torch.onnx.value = dense_resource<n3> : tensor<3x1xf32>} : () -> !torch.vtensor<[3,1],f32> 
    %2 = torch.operator "onnx.Constant"() {torch.onnx.value = dense_resource<n4> : tensor<3x3xf32>} : () -> !torch.vtensor<[3,3],f32> 
    %3 = torch.operator "onnx.Constant"() {torch.onnx.value = dense_resource<n5> : tensor<3xf32>} : () -> !torch.vtensor<[3],f32> 
    %4 = torch.operator "onnx.Constant"() {torch.onnx.value = dense_resource<n6> : tensor<f32>} : () -> !torch.vtensor<[],f32> 
    %5 = torch.operator "onnx.Constant"() {torch.onnx.value = dense_resource<n7> : tensor<1xsi64>} : () -> !torch.vtensor<[1],si64> 
    %6 = torch.operator "onnx.Constant"() {torch.onnx.value = dense_resource<n8> : tensor<si64>} : () -> !torch.vtensor<[],si64> 
    %none = torch.constant.none
    %7 = torch.operator "onnx.Unsqueeze"(%arg0, %0) : (!torch.vtensor<[3,1],f32>, !torch.vtensor<[1],si64>) -> !torch.vtensor<[1,3,1],f32> 
    %8 = torch.operator "onnx.Mul"(%3, %4) : (!torch.vtensor<[3],f32>, !torch.vtensor<[],f32>) -> !torch.vtensor<[3],f32> 
    %9 = torch.operator "onnx.Concat"(%3, %8) {torch.onnx.axis = 0 : si64} : (!torch.vtensor<[3],f32>, !torch.vtensor<[3],f32>) -> !torch.vtensor<[6],f32> 
    %10 = torch.operator "onnx.Unsqueeze"(%1, %0) : (!torch.vtensor<[3,1],f32>, !torch.vtensor<[1],si64>) -> !torch.vtensor<[1,3,1],f32> 
    %11 = torch.operator "onnx.Unsqueeze"(%2, %0) : (!torch.vtensor<[3,3],f32>, !torch.vtensor<[1],si64>) -> !torch.vtensor<[1,3,3],f32> 
    %12 = torch.operator "onnx.Unsqueeze"(%9, %0) : (!torch.vtensor<[6],f32>, !torch.vtensor<[1],si64>) -> !torch.vtensor<[1,6],f32> 
    %13 = torch.operator "onnx.Unsqueeze"(%arg1, %0) : (!torch.vtensor<[3,3],f32>, !torch.vtensor<[1],si64>) -> !torch.vtensor<[1,3,3],f32> 
    %14 = torch.operator "onnx.RNN"(%7, %10, %11, %12, %none, %13) {torch.onnx.activation_alpha = [1.000000e+00 : f32], torch.onnx.activation_beta = [0.000000e+00 : f32], torch.onnx.activations = ["Affine"], torch.onnx.direction = "forward", torch.onnx.hidden_size = 3 : si64} : (!torch.vtensor<[1,3,1],f32>, !torch.vtensor<[1,3,1],f32>, !torch.vtensor<[1,3,3],f32>, !torch.vtensor<[1,6],f32>, !torch.none, !torch.vtensor<[1,3,3],f32>) -> !torch.vtensor<[1,1,3,3],f32> 
    %15 = torch.operator "onnx.Squeeze"(%14, %5) : (!torch.vtensor<[1,1,3,3],f32>, !torch.vtensor<[1],si64>) -> !torch.vtensor<[1,3,3],f32> 
    %16 = torch.operator "onnx.Gather"(%15, %6) {torch.onnx.axis = 0 : si64} : (!torch.vtensor<[1,3,3],f32>, !torch.vtensor<[],si64>) -> !torch.vtensor<[3,3],f32> 
    %17 = torch.operator "onnx.Identity"(%16) : (!torch.vtensor<[3,3],f32>) -> !torch.vtensor<[3,3],f32> 
    return %16, %17 : !torch.vtensor<[3,3],f32>, !torch.vtensor<[3,3],f32>
  }
}

{-#
  dialect_resources: {
    builtin: {
      n2: "0x080000000000000000000000",
      n3: "0x080000000020D8BE00E0CBBE0040E3BE",
      n4: "0x08000000006091BD00A052BD0020A23D0000CDBE0020F8BE0000B9BE00A0B13E00C0D0BE0080D2BE",
      n5: "0x080000000060D0BE00A0D3BE0080993D",
      n6: "0x0800000000000000",
      n7: "0x080000000100000000000000",
      n8: "0x080000000000000000000000"
    }
  }
#-}
